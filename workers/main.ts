/** `npm run worker`: one worker process (the Procfile's `worker`). */
import { loadConfig } from '../src/config/index.js';
import { createRuntime } from '../src/runtime.js';
import { stopOnSignals } from '../src/shutdown.js';
import { startWorkers } from './index.js';

const rt = await createRuntime(loadConfig());
const workers = await startWorkers(rt);
rt.logger.info('worker started');
// SIGTERM: no new jobs, the persist pass in progress finishes, then exit 0 (src/shutdown.ts).
stopOnSignals(rt.logger, async () => {
  await workers.stop();
  await rt.close();
});
