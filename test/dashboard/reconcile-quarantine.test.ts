/**
 * The dashboard's Reconcile screen lists the entries a report found in quarantine (holes
 * in the ledger of record, docs/OPERATIONS.md "Quarantined ledger entries"), escaped, and
 * says nothing of them when there are none (or the report predates them).
 */
import { describe, expect, it } from 'vitest';
import { jobPanel } from '../../src/dashboard/screens/reconcile.js';
import type { ReconcileJobEntry } from '../../src/reconcile/jobs.js';
import type { ReconcileReport } from '../../src/reconcile/report.js';

const empty: ReconcileReport = {
  customers_checked: 2, customers_with_drift: 0, customers_repaired: 0, drift_total: 0, drift: [], errors_total: 0, errors: [],
  anomalies_total: 0, anomalies: [], quarantined_total: 0, quarantined: [], items_max: 1000,
};

function job(result: ReconcileReport): ReconcileJobEntry {
  return {
    object: 'reconcile_job', id: 'rcj_1', project_id: 'proj_1', repair: false, status: 'completed',
    created_at: null, started_at: null, finished_at: new Date(0).toISOString(),
    progress: { customers_done: 2, customers_total: 2, customers_with_drift: 0, drift_total: 0, errors_total: 0, customers_per_second: null },
    result, error: null,
  } as unknown as ReconcileJobEntry;
}

describe('the Reconcile screen', () => {
  it('lists quarantined entries with their seq and why', () => {
    const text = jobPanel('proj_1', job({
      ...empty,
      quarantined_total: 1,
      quarantined: [{ project_id: 'proj_1', customer_id: 'bad<c>', quarantine_id: 7, seq: 12, entry_id: 'le_x', error: 'invalid byte sequence for encoding "UTF8": 0x00' }],
    })).toString();
    expect(text).toContain('data-testid="quarantined-list"');
    expect(text).toMatch(/data-seq="12"/);
    expect(text).toContain('bad&lt;c&gt;');
    expect(text).toContain('npm run quarantine -- list');
  });

  it('says nothing of quarantine when there is none, or the report predates it', () => {
    expect(jobPanel('proj_1', job(empty)).toString()).not.toContain('quarantined-list');
    const { quarantined: _q, quarantined_total: _t, ...old } = empty;
    expect(jobPanel('proj_1', job(old as ReconcileReport)).toString()).not.toContain('quarantined-list');
  });
});
