/** `npm run web`: one API process (the Procfile's `web`). */
import { loadConfig } from './config/index.js';
import { createRuntime } from './runtime.js';
import { listen } from './server.js';
import { exitIfPortInUse } from './config/ports.js';
import { stopOnSignals, WebDrain } from './shutdown.js';

const rt = await createRuntime(loadConfig());
// A taken PORT or METRICS_PORT: one line, exit 1.
const server = await listen(rt).catch(exitIfPortInUse);
// SIGTERM: drain, settle every call, close Redis and PostgreSQL, exit 0 (src/shutdown.ts).
const drain = new WebDrain(rt, server, rt.config.SHUTDOWN_GRACE_MS);
stopOnSignals(
  rt.logger,
  async () => {
    await drain.run();
    await rt.close();
  },
  () => drain.cut(),
);
