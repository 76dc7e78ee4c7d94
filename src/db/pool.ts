/**
 * PostgreSQL access through slonik; queries live beside their domain as factories.
 * int8 columns are read as JS numbers: every amount is capped at 10^15 credits and every
 * sum we read stays below 2^53, where numbers are exact. timestamptz reads as epoch ms.
 */
import { createPool, createTypeParserPreset, type DatabasePool, type Interceptor } from 'slonik';

export async function createDb(databaseUrl: string, maximumPoolSize = 10, interceptors: Interceptor[] = []): Promise<DatabasePool> {
  const typeParsers = [
    ...createTypeParserPreset().filter((p) => p.name !== 'int8'),
    { name: 'int8', parse: (value: string) => Number(value) },
  ];
  // No DISCARD ALL when a connection goes back to the pool (slonik's default reset): the
  // service keeps no session state (it sets no GUCs, uses no temporary tables, holds no
  // advisory locks past a query), and the reset was one more round trip per checkout.
  return createPool(databaseUrl, {
    maximumPoolSize,
    connectionTimeout: 5_000,
    statementTimeout: 30_000,
    typeParsers,
    resetConnection: async () => {},
    interceptors,
  });
}
