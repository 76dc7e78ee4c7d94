/**
 * PostgreSQL access through slonik; queries live beside their domain as factories.
 * int8 columns are read as JS numbers: every amount is capped at 10^15 credits and every
 * sum we read stays below 2^53, where numbers are exact. timestamptz reads as epoch ms.
 */
import { createPool, createTypeParserPreset, type DatabasePool } from 'slonik';

export async function createDb(databaseUrl: string, maximumPoolSize = 10): Promise<DatabasePool> {
  const typeParsers = [
    ...createTypeParserPreset().filter((p) => p.name !== 'int8'),
    { name: 'int8', parse: (value: string) => Number(value) },
  ];
  return createPool(databaseUrl, { maximumPoolSize, connectionTimeout: 5_000, statementTimeout: 30_000, typeParsers });
}
