/** `npm run migrate`: applies pending migrations and says which. */
import { loadConfig } from '../config/index.js';
import { migrate } from '../db/migrate.js';

const applied = await migrate(loadConfig().DATABASE_URL);
console.log(applied.length ? `applied: ${applied.join(', ')}` : 'database is up to date');
