/** `npm run web`: one API process (the Procfile's `web`). */
import { loadConfig } from './config/index.js';
import { createRuntime } from './runtime.js';
import { listen } from './server.js';

const rt = await createRuntime(loadConfig());
const server = await listen(rt);
const shutdown = async () => {
  await server.close();
  await rt.close();
  process.exit(0);
};
process.once('SIGTERM', shutdown);
process.once('SIGINT', shutdown);
