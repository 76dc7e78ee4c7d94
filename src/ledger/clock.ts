/**
 * The offset added to Redis TIME by every script. It is 0 in production; tests that need
 * time to pass (TTLs, source windows) move it, which only works with SVC_CLOCK_CONTROL.
 */
export class Clock {
  private offset = 0;

  constructor(private readonly controllable: boolean) {}

  offsetMs(): number {
    return this.offset;
  }

  advance(ms: number): void {
    if (!this.controllable) throw new Error('clock control is disabled (set SVC_CLOCK_CONTROL=1)');
    this.offset += ms;
  }
}
