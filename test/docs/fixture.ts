/**
 * The service the docs' examples run against: what `npm start` sets up on an empty
 * database (the demo organization, project, keys, funded demo customer and the two demo
 * models on a mock upstream), in a test service of its own. The organization is made 40
 * days old, so that its first billing period has closed into an invoice for the invoice
 * examples (docs/API.md, "Invoices", says so). The demo customer's deposit wrote the
 * events example's event; a receiver on loopback takes the webhook examples' deliveries.
 * The programs run in a folder of their own outside the project (test/docs/programs.ts),
 * where their packages are installed while the service starts.
 */
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { sql } from 'slonik';
import { Invoicing } from '../../src/billing/invoices.js';
import { bootstrapDemo } from '../../src/bootstrap.js';
import { startMockUpstream, type MockUpstream } from '../../src/gateway/mock/server.js';
import { startTestService, waitFor, type TestService } from '../helpers.js';
import { parseExamples, runCurlExample, type Example, type ExampleEnv } from './examples.js';
import { ProgramFolder } from './programs.js';

export const doc_files = ['docs/API.md', 'docs/GUIDE.md'];

export interface DocsFixture {
  svc: TestService;
  mock: MockUpstream;
  env: ExampleEnv;
  /** Where the programs are installed and run. */
  programs: ProgramFolder;
  /** Runs one example, once the workers have persisted what came before (usage lists read PostgreSQL). */
  run(ex: Example): Promise<string>;
  close(): Promise<void>;
}

export async function startDocsFixture(repoRoot: string): Promise<DocsFixture> {
  const programs = doc_files.flatMap((f) => parseExamples(f, readFileSync(join(repoRoot, f), 'utf8'))).filter((ex) => ex.program);
  // The install runs while the service starts; a failed install stops the service again.
  const installing = ProgramFolder.create(programs, repoRoot);
  installing.catch(() => {}); // awaited below, once the service has started
  const mock = await startMockUpstream({ port: 0 });
  const svc = await startTestService({ workers: true, config: { SVC_MASTER_KEY: randomBytes(32).toString('hex') } });
  const folder = await installing.catch(async (err: unknown) => {
    await svc.close();
    await mock.close();
    throw err;
  });
  const demo = await bootstrapDemo(svc.rt, mock.url);
  await svc.rt.db.query(sql.unsafe`UPDATE organizations SET created_at = now() - interval '40 days', next_invoice_at = NULL WHERE id = ${demo.organization_id}`);
  await new Invoicing(svc.rt.db, svc.rt.redis, svc.rt.config.REDIS_PREFIX, 0, svc.rt.logger).closeOrganization(demo.organization_id, Date.now());
  const receiver = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(204).end());
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  // The curl examples' directory: their cookie jar lives there.
  const workDir = mkdtempSync(join(tmpdir(), 'docs-examples-'));
  const env: ExampleEnv = {
    BASE_URL: svc.url,
    API_KEY: demo.project_key,
    ADMIN_KEY: demo.admin_key,
    CUSTOMER_KEY: demo.customer_key,
    PROJECT_ID: demo.project_id,
    MOCK_URL: mock.url,
    TRANSACTION_ID: '',
    KEY_ID: '',
    MEMBER_ID: '',
    NEW_PROJECT_ID: '',
    ORGANIZATION_ID: demo.organization_id,
    OWNER_PASSWORD: demo.owner.password,
    CSRF_TOKEN: '',
    INVOICE_ID: '',
    JOB_ID: '',
    WEBHOOK_URL: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/webhooks`,
    WEBHOOK_ID: '',
    DELIVERY_ID: '',
  };
  return {
    svc,
    mock,
    env,
    programs: folder,
    async run(ex) {
      await svc.drained();
      const answer = ex.program ? await folder.run(ex, env) : await runCurlExample(ex, env, workDir);
      const created = answer.startsWith('HTTP/1.1 201');
      // $TRANSACTION_ID: the last gateway call's, for the receipt examples.
      const tx = /^X-Service-Transaction-Id: (\S+)$/im.exec(answer);
      if (tx) env.TRANSACTION_ID = tx[1];
      // $KEY_ID, $MEMBER_ID, $NEW_PROJECT_ID: the last key, member and project an example created.
      const key = /^ {2}"id": "(key_[^"]+)"/m.exec(answer);
      if (key && created) env.KEY_ID = key[1];
      const member = /^ {2}"id": "(mem_[^"]+)"/m.exec(answer);
      if (member && created) env.MEMBER_ID = member[1];
      const project = /^ {2}"id": "(proj_[^"]+)"/m.exec(answer);
      if (project && created) env.NEW_PROJECT_ID = project[1];
      // $CSRF_TOKEN: the last sign-in's; $INVOICE_ID: the first of the last invoice list.
      const csrf = /^ {2}"csrf_token": "([^"]+)"/m.exec(answer);
      if (csrf) env.CSRF_TOKEN = csrf[1];
      const invoice = /^ {6}"id": "(inv_[^"]+)"/m.exec(answer);
      if (invoice) env.INVOICE_ID = invoice[1];
      // $JOB_ID: the reconcile job just started, read by the next example once it has finished.
      const job = /^ {2}"id": "(rcj_[^"]+)"/m.exec(answer);
      if (job && answer.startsWith('HTTP/1.1 202')) {
        env.JOB_ID = job[1];
        await waitFor(async () => {
          const r = await svc.call('GET', `/v1/admin/projects/${env.PROJECT_ID}/reconcile/${env.JOB_ID}`, { key: env.ADMIN_KEY });
          return r.body.status === 'completed' || r.body.status === 'failed' ? true : null;
        }, 60_000, 'the reconcile job to finish');
      }
      // $WEBHOOK_ID: the endpoint just created; $DELIVERY_ID: the test send's delivery, read
      // by the next examples once its attempt (or the replay's) is in the log.
      const webhook = /^ {2}"id": "(whk_[^"]+)"/m.exec(answer);
      if (webhook && created) env.WEBHOOK_ID = webhook[1];
      const delivery = /^ {2}"id": "(dlv_[^"]+)"/m.exec(answer);
      if (delivery && answer.startsWith('HTTP/1.1 202')) {
        env.DELIVERY_ID = delivery[1];
        const before = (JSON.parse(answer.slice(answer.indexOf('\n{') + 1)) as { attempts: unknown[] }).attempts.length;
        await waitFor(async () => {
          const r = await svc.call('GET', `/v1/webhooks/${env.WEBHOOK_ID}/deliveries`, { key: env.API_KEY });
          const d = (r.body.data as { id: string; attempts: unknown[] }[]).find((x) => x.id === env.DELIVERY_ID);
          return d !== undefined && d.attempts.length > before ? true : null;
        }, 30_000, 'the webhook delivery attempt');
      }
      return answer;
    },
    async close() {
      // Sign-in reads a bounded number of memberships of an email: the demo owner's address
      // of this organization must not crowd out other files' demos in a reused test database.
      const client = new pg.Client({ connectionString: svc.rt.config.DATABASE_URL });
      await client.connect();
      await client.query('DELETE FROM members WHERE organization_id = $1', [demo.organization_id]).finally(() => client.end());
      await svc.close();
      await mock.close();
      receiver.closeAllConnections();
      await new Promise((resolve) => receiver.close(resolve));
      rmSync(workDir, { recursive: true, force: true });
      folder.close();
    },
  };
}
