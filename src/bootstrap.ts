/**
 * Creating an organization with its first admin key (`npm run bootstrap`), and the demo
 * that the first `npm start` on an empty database sets up.
 */
import { createAdminQueries } from './admin/queries.js';
import { generatePassword, hashPassword } from './members/passwords.js';
import { createMemberQueries } from './members/store.js';
import type { Config } from './config/index.js';
import type { Runtime } from './runtime.js';

/**
 * The owner's email when none is given: one of the organization's own. Sign-in without an
 * organization checks at most sign_in_candidates_max memberships of an email, so one
 * address shared by every bootstrap on a database would, past that many, have to name
 * its organization to sign in.
 */
function defaultOwnerEmail(organizationId: string): string {
  return `owner+${organizationId.replace(/^org_/, '')}@example.com`;
}

/**
 * A new organization with its admin key and its first owner member (a password made
 * here; the email `ownerEmail`, else defaultOwnerEmail's), and where that owner signs in.
 */
export async function bootstrapOrganization(rt: Runtime, name: string, ownerEmail: string | null, opts: { demoAllowance?: boolean } = {}) {
  const admin = createAdminQueries(rt.db);
  const org = await admin.createOrganization(name, opts);
  const { secret } = await rt.keyQueries.insertKey({ organizationId: org.id, projectId: null, type: 'admin', name: 'bootstrap' });
  const owner = await createOwner(rt, org.id, ownerEmail ?? defaultOwnerEmail(org.id));
  return { organization_id: org.id, admin_key: secret, owner, dashboard_url: dashboardUrl(rt.config) };
}

/** The dashboard's address: PUBLIC_URL's, else the API's own. */
export function dashboardUrl(config: Pick<Config, 'PUBLIC_URL' | 'HOST' | 'PORT'>, port = config.PORT): string {
  const host = config.HOST === '0.0.0.0' || config.HOST === '::' ? '127.0.0.1' : config.HOST;
  return `${(config.PUBLIC_URL ?? `http://${host}:${port}`).replace(/\/+$/, '')}/dashboard`;
}

export interface Demo {
  models: string[];
  organization_id: string;
  admin_key: string;
  project_id: string;
  project_key: string;
  customer_key: string;
  customer_id: string;
  /** The dashboard's sign-in: the organization's owner. */
  owner: { email: string; password: string };
}

export const demo_owner_email = 'owner@demo.example';

/** An organization's owner member with a password made here (shown once by the caller). */
async function createOwner(rt: Runtime, organizationId: string, email: string) {
  const password = generatePassword();
  await createMemberQueries(rt.db).create(organizationId, { email, role: 'owner', passwordHash: await hashPassword(password) }, null);
  return { email, password };
}

const demo_customer_id = 'demo-customer';
const demo_deposit_credits = 10_000_000; // $10

/** The demo's models, served by the built-in mock upstream. */
function demoModel(provider: 'openai' | 'anthropic', upstreamBaseUrl: string) {
  return {
    provider,
    upstream_base_url: upstreamBaseUrl,
    upstream_model: provider === 'openai' ? 'mock-gpt' : 'mock-claude',
    upstream_api_key: 'mock-upstream-key',
    display_name: provider === 'openai' ? 'Demo chat model (mock upstream)' : 'Demo messages model (mock upstream)',
    description: 'Answers with counted tokens from the built-in mock provider.',
    context_window: 128_000,
    max_output_tokens: 4_096,
    supports_streaming: true,
    active: true,
    input_price_per_million_credits: 2_500_000, // $2.50 per million input tokens
    output_price_per_million_credits: 10_000_000, // $10 per million output tokens
    cache_read_price_per_million_credits: 1_250_000,
    cache_write_price_per_million_credits: 3_125_000,
  };
}

/** The demo's Responses API model (`POST /v1/responses`): an OpenAI model of wire format `responses`. */
function demoResponsesModel(upstreamBaseUrl: string) {
  return { ...demoModel('openai', upstreamBaseUrl), wire_format: 'responses' as const, display_name: 'Demo Responses API model (mock upstream)' };
}

/**
 * The demo's embedding model (`POST /v1/embeddings`): an OpenAI-format model whose output
 * price is 0, as an embedding generates no output; billed at its input price only.
 */
function demoEmbeddingModel(upstreamBaseUrl: string) {
  return {
    ...demoModel('openai', upstreamBaseUrl),
    upstream_model: 'mock-embed',
    display_name: 'Demo embedding model (mock upstream)',
    description: 'Answers deterministic vectors from the built-in mock provider, billed per input token.',
    context_window: 8_192,
    max_output_tokens: 1,
    supports_streaming: false,
    input_price_per_million_credits: 20_000, // $0.02 per million input tokens
    output_price_per_million_credits: 0,
    cache_read_price_per_million_credits: 0,
    cache_write_price_per_million_credits: 0,
  };
}

export async function bootstrapDemo(rt: Runtime, mockUpstreamUrl: string): Promise<Demo> {
  // On Free, whose upgrade can be tried, with the demo allowance: the demo's own two keys
  // would otherwise fill Free's two key slots, and its project Free's one project.
  const { organization_id, admin_key, owner } = await bootstrapOrganization(rt, 'Demo organization', demo_owner_email, { demoAllowance: true });
  const project = await createAdminQueries(rt.db).createProject(organization_id, 'Demo project', 'B');
  const projectKey = await rt.keyQueries.insertKey({ organizationId: organization_id, projectId: project.id, type: 'project', name: 'demo project key' });
  const customerKey = await rt.keyQueries.insertKey({
    organizationId: organization_id,
    projectId: project.id,
    type: 'customer',
    name: 'demo customer key',
    customerId: demo_customer_id,
  });
  await rt.modelQueries.upsertModel(project.id, 'demo-gpt', demoModel('openai', mockUpstreamUrl));
  await rt.modelQueries.upsertModel(project.id, 'demo-claude', demoModel('anthropic', mockUpstreamUrl));
  await rt.modelQueries.upsertModel(project.id, 'demo-responses', demoResponsesModel(mockUpstreamUrl));
  await rt.modelQueries.upsertModel(project.id, 'demo-embed', demoEmbeddingModel(mockUpstreamUrl));
  await rt.ledger.deposit(
    { projectId: project.id, organizationId: organization_id },
    {
      customerId: demo_customer_id,
      amount: demo_deposit_credits,
      wallet: 'credits',
      label: 'welcome credit',
      startsAtMs: null,
      expiresAtMs: null,
      idempotencyKey: 'demo-welcome',
      name: 'Demo Customer',
      email: 'demo@example.com',
      description: 'demo funding',
    },
  );
  return {
    models: ['demo-gpt', 'demo-claude', 'demo-responses', 'demo-embed'],
    organization_id,
    admin_key,
    project_id: project.id,
    project_key: projectKey.secret,
    customer_key: customerKey.secret,
    customer_id: demo_customer_id,
    owner,
  };
}
