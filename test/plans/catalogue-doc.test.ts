/**
 * The plans table of docs/API.md ("Plans") against the catalogue: prices, allowances,
 * overage rates, hard limit and the creation limits, row by row; and the demo allowance.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { demo_allowance, planIds, plans } from '../../src/plans/catalogue.js';

const doc = readFileSync(new URL('../../docs/API.md', import.meta.url), 'utf8');
const section = doc.slice(doc.indexOf('\n## Plans\n'), doc.indexOf('\n## Plans and billable operations\n'));

const count = (n: number | null) => (n === null ? 'unlimited' : n.toLocaleString('en-US'));
const usd = (micro: number) => `$${(micro / 1_000_000).toLocaleString('en-US', { maximumFractionDigits: 2, minimumFractionDigits: Number.isInteger(micro / 1_000_000) ? 0 : 2 })}`;

describe('docs/API.md "Plans"', () => {
  it('has one row per plan that matches the catalogue', () => {
    expect(section.length).toBeGreaterThan(100);
    const rows = new Map([...section.matchAll(/^\| `([a-z0-9_]+)` \| (.+) \|$/gm)].map((m) => [m[1], m[2].split(' | ')]));
    expect([...rows.keys()]).toEqual([...planIds]);
    for (const id of planIds) {
      const p = plans[id];
      const [price, included, overage, hard, projects, keys, members] = rows.get(id)!;
      expect([id, price]).toEqual([id, p.priceMicroUsd === null ? 'custom contract' : usd(p.priceMicroUsd)]);
      expect([id, included]).toEqual([id, p.includedOps === null ? 'not counted against' : count(p.includedOps)]);
      expect([id, overage]).toEqual([id, p.overageMicroUsdPerOp === 0 ? 'none' : `${usd(p.overageMicroUsdPerOp * 10_000)} per 10,000 ops`]);
      expect([id, hard.startsWith('yes')]).toEqual([id, p.hardLimit]);
      expect([id, projects, keys, members]).toEqual([id, count(p.projectsMax), count(p.keysPerProjectMax), count(p.membersMax)]);
    }
  });

  it('states the demo allowance', () => {
    expect(section.replace(/\s+/g, ' ')).toContain(
      `up to ${demo_allowance.projectsMax} projects, ${demo_allowance.keysPerProjectMax} keys per project (the demo's own two included) and ${demo_allowance.membersMax} members`,
    );
  });
});
