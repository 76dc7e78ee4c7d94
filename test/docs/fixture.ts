/**
 * The service the docs' examples run against: what `npm start` sets up on an empty
 * database (the demo organization, project, keys, funded demo customer and the two demo
 * models on a mock upstream), in a test service of its own.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { bootstrapDemo } from '../../src/bootstrap.js';
import { startMockUpstream, type MockUpstream } from '../../src/gateway/mock/server.js';
import { startTestService, type TestService } from '../helpers.js';
import { parseExamples, runExample, type Example, type ExampleEnv } from './examples.js';

export const doc_files = ['docs/API.md', 'docs/GUIDE.md'];

export interface DocsFixture {
  svc: TestService;
  mock: MockUpstream;
  env: ExampleEnv;
  /** Runs one example, once the workers have persisted what came before (usage lists read PostgreSQL). */
  run(ex: Example): Promise<string>;
  close(): Promise<void>;
}

export async function startDocsFixture(repoRoot: string): Promise<DocsFixture> {
  const mock = await startMockUpstream({ port: 0 });
  const svc = await startTestService({ workers: true, config: { SVC_MASTER_KEY: randomBytes(32).toString('hex') } });
  const demo = await bootstrapDemo(svc.rt, mock.url);
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
  };
  return {
    svc,
    mock,
    env,
    async run(ex) {
      await svc.drained();
      const answer = await runExample(ex, env, repoRoot);
      // $TRANSACTION_ID: the last gateway call's, for the receipt examples.
      const tx = /^X-Service-Transaction-Id: (\S+)$/im.exec(answer);
      if (tx) env.TRANSACTION_ID = tx[1];
      // $KEY_ID, $MEMBER_ID: the last key and member an example created.
      const key = /^ {2}"id": "(key_[^"]+)"/m.exec(answer);
      if (key && answer.startsWith('HTTP/1.1 201')) env.KEY_ID = key[1];
      const member = /^ {2}"id": "(mem_[^"]+)"/m.exec(answer);
      if (member && answer.startsWith('HTTP/1.1 201')) env.MEMBER_ID = member[1];
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
    },
  };
}

export function examplesOf(file: string, markdown: string): Example[] {
  return parseExamples(file, markdown);
}
