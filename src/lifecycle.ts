/**
 * What a process's graceful shutdown reads and waits for (src/shutdown.ts): whether it is
 * stopping (GET /health/ready answers 503 from then on), and counts of work in flight that
 * must finish before Redis and PostgreSQL are closed (gateway calls and their background
 * settlements). A count is a plain integer: nothing is allocated per call.
 */

/** A count of work in flight, and a wait for it to reach zero. */
export class InFlight {
  private n = 0;
  private waiters: (() => void)[] = [];

  get count(): number {
    return this.n;
  }

  begin(): void {
    this.n++;
  }

  end(): void {
    this.n--;
    if (this.n === 0 && this.waiters.length > 0) {
      const waiting = this.waiters;
      this.waiters = [];
      for (const wake of waiting) wake();
    }
  }

  /** Resolves true once nothing is in flight, or false after `timeoutMs` with work still in flight. */
  idle(timeoutMs: number): Promise<boolean> {
    if (this.n === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== wake);
        resolve(this.n === 0);
      }, timeoutMs);
      const wake = () => {
        clearTimeout(timer);
        resolve(true);
      };
      this.waiters.push(wake);
    });
  }
}

/** The process's own state, shared by its parts. */
export class Lifecycle {
  /** Set once on SIGTERM (or SIGINT): GET /health/ready answers 503 from then on. */
  stopping = false;
}
