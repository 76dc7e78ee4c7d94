/**
 * Which commands a Redis connection sends, from a MONITOR connection of its own
 * (test/ledger/one-script.test.ts, test/gateway/one-script.test.ts): every command is
 * heard with the address of the client that sent it, and script calls are named by their
 * script.
 */
import { connect, type Socket } from 'node:net';
import { boundOperations, boundScriptName, customerScriptNames, other_scripts, scriptSource } from '../../src/redis/scripts.js';

const scriptNames = [...customerScriptNames, ...Object.keys(other_scripts), ...boundOperations.map(boundScriptName)];
/** Every script under lua/ as FCALL names it: by its function (src/redis/scripts.ts). */
const scriptByFn = new Map(scriptNames.map((name) => [scriptSource(name).fn, name]));

/** What a MONITOR line shows of a command: its name, and the script's name for FCALL. */
export function describeCommand(args: string[]): string {
  const name = args[0].toLowerCase();
  if (name === 'fcall') return `script ${scriptByFn.get(args[1]) ?? args[1]}`;
  return name;
}

/**
 * A MONITOR connection of its own, on a plain socket: ioredis's monitor mode loses a race
 * on a busy Redis (a line that comes with MONITOR's +OK fails as "Command queue state
 * error"). Calls `heard` with each command's client address and its arguments, as MONITOR
 * quotes them.
 */
export async function watchCommands(url: string, heard: (source: string, args: string[]) => void): Promise<Socket> {
  const u = new URL(url);
  const socket = connect(Number(u.port || 6379), u.hostname);
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  let buffer = '';
  let started: () => void;
  const monitoring = new Promise<void>((resolve) => (started = resolve));
  socket.on('data', (chunk) => {
    buffer += chunk.toString('latin1');
    const lines = buffer.split('\r\n');
    buffer = lines.pop()!;
    for (const line of lines) {
      if (line === '+OK') started();
      const m = /^\+\S+ \[\d+ (\S+)\] (".*)$/.exec(line);
      if (m) heard(m[1], [...m[2].matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((a) => a[1]));
    }
  });
  socket.write('MONITOR\r\n');
  await monitoring;
  return socket;
}

/** The address (host:port) a connection's commands show in MONITOR lines. */
export async function clientAddress(redis: { client(sub: 'INFO'): Promise<unknown> }): Promise<string> {
  return /(?:^|\s)addr=(\S+)/.exec(String(await redis.client('INFO')))![1];
}
