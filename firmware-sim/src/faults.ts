// Faults that can be switched on for a bus at any time (library API, REPL, config file).
export interface LockRef {
  board: number;
  lock: number;
}

export interface Faults {
  /** Boards act on commands but their replies never reach the host (lost on the wire). */
  noReply: boolean;
  /** Extra delay before every reply, in ms (on top of wire time). 0 = off. */
  lateReplyMs: number;
  /** Line noise bytes precede every reply. */
  garbageBeforeReply: boolean;
  /** Every reply goes out with a wrong checksum (last byte). */
  badChecksum: boolean;
  /** Latch does not release on an unlock pulse: the door stays shut. */
  stuckLatch: LockRef[];
  /** The door does not move: it neither springs open nor closes (latch releases for the pulse only). */
  jammedDoor: LockRef[];
  /** Boards that have dropped off the bus: they neither act nor answer. */
  offlineBoards: number[];
  /** The USB-RS485 adapter echoes every byte the host sends back to the host. */
  echo: boolean;
}

/** The bytes prepended by garbageBeforeReply: none of them can start a frame in any dialect. */
export const GARBAGE_BYTES: readonly number[] = [0x00, 0xff, 0x55, 0xfe];

export function noFaults(): Faults {
  return {
    noReply: false,
    lateReplyMs: 0,
    garbageBeforeReply: false,
    badChecksum: false,
    stuckLatch: [],
    jammedDoor: [],
    offlineBoards: [],
    echo: false,
  };
}

export function hasLock(list: LockRef[], board: number, lock: number): boolean {
  return list.some((r) => r.board === board && r.lock === lock);
}

/** Short human summary of the active faults, e.g. "late 300ms, stuck 0/3". */
export function describeFaults(f: Faults): string {
  const parts: string[] = [];
  if (f.noReply) parts.push('noReply');
  if (f.lateReplyMs > 0) parts.push(`lateReply ${f.lateReplyMs}ms`);
  if (f.garbageBeforeReply) parts.push('garbage');
  if (f.badChecksum) parts.push('badChecksum');
  if (f.stuckLatch.length) parts.push(`stuckLatch ${f.stuckLatch.map((r) => `${r.board}/${r.lock}`).join(',')}`);
  if (f.jammedDoor.length) parts.push(`jammedDoor ${f.jammedDoor.map((r) => `${r.board}/${r.lock}`).join(',')}`);
  if (f.offlineBoards.length) parts.push(`offline ${f.offlineBoards.join(',')}`);
  if (f.echo) parts.push('echo');
  return parts.length ? parts.join(', ') : 'none';
}
