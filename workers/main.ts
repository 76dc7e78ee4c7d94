/** `npm run worker`: one worker process (the Procfile's `worker`). */
import { loadConfig } from '../src/config/index.js';
import { createRuntime } from '../src/runtime.js';
import { stopOnSignals } from '../src/shutdown.js';
import { startWorkers } from './index.js';
import { exitIfPortInUse } from '../src/config/ports.js';

const rt = await createRuntime(loadConfig());
// A taken WORKER_METRICS_PORT: one line, exit 1.
const workers = await startWorkers(rt).catch(exitIfPortInUse);
rt.logger.info('worker started');
// SIGTERM: no new jobs, the persist pass in progress finishes, then exit 0 (src/shutdown.ts).
stopOnSignals(rt.logger, async () => {
  await workers.stop();
  await rt.close();
});
