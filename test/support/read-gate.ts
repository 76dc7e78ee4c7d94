/**
 * Holds reads of a cache's loader after they read their row, while shut, so that a test
 * can land an invalidation while the reads are in flight (the cache race tests).
 */
export class ReadGate {
  /** Reads that reached the gate while it was shut. */
  arrivals = 0;
  private open: (() => void) | null = null;
  private gate: Promise<void> | null = null;

  shut(): void {
    this.gate = new Promise((resolve) => (this.open = resolve));
  }

  release(): void {
    this.open?.();
    this.gate = null;
  }

  /** A read calls this after reading its row: it waits while the gate is shut. */
  async pass(): Promise<void> {
    if (!this.gate) return;
    this.arrivals++;
    await this.gate;
  }
}
