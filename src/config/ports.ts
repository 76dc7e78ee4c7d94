/**
 * A port that a process is told to listen on and finds taken: the process says so in one
 * line, naming the port and the variable that sets it, and exits 1 (no stack trace: the
 * cause is the machine's, not the code's).
 */

/** EADDRINUSE on `port`, which `variable` sets. */
class PortInUseError extends Error {
  constructor(
    readonly port: number,
    readonly variable: string,
  ) {
    super(`port ${port} is already in use: set ${variable} to another port`);
    this.name = 'PortInUseError';
  }
}

/** The error of a listen on `port` (set by `variable`): a PortInUseError when the port is taken, else `err` as it is. */
export function listenError(err: unknown, port: number, variable: string): unknown {
  return (err as NodeJS.ErrnoException | null)?.code === 'EADDRINUSE' ? new PortInUseError(port, variable) : err;
}

/**
 * For a process's entry point: a taken port prints its one line to stderr and exits 1;
 * any other error is thrown on, as it was.
 */
export function exitIfPortInUse(err: unknown): never {
  if (err instanceof PortInUseError) {
    console.error(err.message);
    process.exit(1);
  }
  throw err;
}
