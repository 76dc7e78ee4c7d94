/** `npm run worker`: one worker process (the Procfile's `worker`). */
import { loadConfig } from '../src/config/index.js';
import { createRuntime } from '../src/runtime.js';
import { startWorkers } from './index.js';

const rt = await createRuntime(loadConfig());
const workers = await startWorkers(rt);
rt.logger.info('worker started');
const shutdown = async () => {
  await workers.stop();
  await rt.close();
  process.exit(0);
};
process.once('SIGTERM', shutdown);
process.once('SIGINT', shutdown);
