// What a logged-in technician can do from the diagnostics page (diagnostics.ts routes these under
// /api/actions/*), and the locker wall the page shows. Every action is journalled as a
// `technicianAction` event ({ who: 'technician', action, target..., outcome }) and so reported to
// the central service like any other event. Code values never pass through here: the scanner
// test reports a code's type and length only and the code is not treated as a credential.
import { EventEmitter } from 'node:events';
import type { LockRef } from '@locker/common';
import { LockBusError, type LockBusEvents } from '@locker/lockbus';
import type { AgentState, TechnicianHost } from '../host';

export type WallStatus = 'free' | 'booked' | 'occupied' | 'open' | 'fault';
export type WallFault = 'jam' | 'forced-open' | 'left-open' | 'board-offline';

export interface WallEntry {
  bus: string;
  board: number;
  lock: number;
  lockerUid: string | null;
  name: string | null;
  /** the provisioned size ({ code, width, height, length } in cm) as the central service pushed it */
  size: unknown;
  serviceState: string | null;
  status: WallStatus;
  fault: WallFault | null;
  item: boolean | null;
  door: string;
  shipmentState: string | null;
}

export interface DoorTestResult {
  bus: string;
  board: number;
  lock: number;
  /** null when it cannot be known: the board could not be read while the door should have opened (fault 'unobserved') */
  opened: boolean | null;
  closed: boolean;
  itemSeen: boolean | null;
  /** from the unlock to the door closed again; null when it did not close */
  ms: number | null;
  /**
   * null, 'jam', 'board-offline', 'unobserved' (a poll of the board failed while the door should
   * have opened, and it read shut afterwards: whether it opened is not known, so no jam is
   * claimed), 'not-opened' (timed out shut), 'not-closed' (timed out open), or the open's error
   * (UNKNOWN_LOCK, BUS_UNAVAILABLE, ...)
   */
  fault: string | null;
}

export interface BusScanReport {
  bus: string;
  found: number[];
  missing: number[];
  unexpected: number[];
  garbled: number[];
}

export interface ScannerTestState {
  /** waiting for the next code since (ISO), null when no test runs */
  waitingSince: string | null;
  /** the last test's result (never the code itself) */
  last: { reader: string; type: 'qr' | 'keypad'; length: number; at: string } | null;
}

/** What went wrong, as the HTTP layer answers it. */
export class ActionError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly extra: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

export type { TechnicianHost } from '../host';

const key = (r: LockRef) => `${r.bus}/${r.board}/${r.lock}`;
const WATCHED = ['doorOpened', 'doorClosed', 'itemPlaced', 'itemRemoved', 'jam', 'forcedOpen', 'doorLeftOpen', 'boardOffline', 'boardOnline', 'portOpened', 'portClosed'] as const;

export interface TechnicianActionsEvents {
  /** something the wall shows may have changed */
  change: [];
}

export class TechnicianActions extends EventEmitter<TechnicianActionsEvents> {
  /** faults of locks seen as events since start (cleared by what ends them) */
  private readonly faults = new Map<string, Exclude<WallFault, 'board-offline'>>();
  private readonly busListeners: [string, (e: any) => void][] = [];
  /** the door test or bus scan under way (one at a time: a scan pauses the polling a door test watches) */
  private busy: string | null = null;
  private scanner: ScannerTestState = { waitingSince: null, last: null };

  constructor(private readonly host: TechnicianHost) {
    super();
  }

  start(): void {
    for (const ev of WATCHED) {
      const fn = (e: any) => this.onBusEvent(ev, e);
      this.host.buses.on(ev, fn);
      this.busListeners.push([ev, fn]);
    }
  }

  stop(): void {
    for (const [ev, fn] of this.busListeners.splice(0)) this.host.buses.off(ev as keyof LockBusEvents, fn);
    this.host.credentialTap = null;
  }

  private onBusEvent(type: (typeof WATCHED)[number], e: any): void {
    if (e && typeof e.lock === 'number') {
      const k = key(e);
      if (type === 'jam') this.faults.set(k, 'jam');
      else if (type === 'forcedOpen') this.faults.set(k, 'forced-open');
      else if (type === 'doorLeftOpen') this.faults.set(k, 'left-open');
      else if (type === 'doorOpened' && this.faults.get(k) === 'jam') this.faults.delete(k);
      else if (type === 'doorClosed') this.faults.delete(k);
    }
    this.emit('change');
  }

  // ---------------------------------------------------------------- the wall

  /** Every configured lock with its locker (provisioning pushed by the central service) and live state. */
  wall(state: AgentState = this.host.state()): WallEntry[] {
    const usages = new Map<string, Set<string>>();
    try {
      for (const u of this.host.store.codeUsages()) {
        const k = key(u);
        usages.set(k, (usages.get(k) ?? new Set()).add(u.usage));
      }
    } catch {
      /* store closed */
    }
    const out: WallEntry[] = [];
    for (const b of state.buses) {
      for (const bd of b.boards) {
        for (const l of bd.locks) {
          const ref = { bus: b.name, board: bd.address, lock: l.lock };
          const k = key(ref);
          let info: ReturnType<TechnicianHost['store']['lockerInfo']> = null;
          try {
            info = this.host.store.lockerInfo(ref.bus, ref.board, ref.lock);
          } catch {
            /* store closed */
          }
          const fault: WallFault | null = bd.online === false ? 'board-offline' : (this.faults.get(k) ?? null);
          const u = usages.get(k);
          let status: WallStatus;
          if (fault) status = 'fault';
          else if (l.door === 'open') status = 'open';
          else if (l.item === true || (l.item === null && u?.has('PickUp'))) status = 'occupied';
          else if (u?.has('DropOff') || (l.item === null && info?.shipmentState)) status = 'booked';
          else status = 'free';
          out.push({
            ...ref,
            lockerUid: info?.uid ?? l.lockerUid,
            name: info?.name ?? null,
            size: info?.size ?? null,
            serviceState: info?.serviceState ?? null,
            status,
            fault,
            item: l.item,
            door: l.door,
            shipmentState: info?.shipmentState ?? null,
          });
        }
      }
    }
    return out;
  }

  scannerTestState(): ScannerTestState {
    return { ...this.scanner };
  }

  // ---------------------------------------------------------------- actions

  private journal(fields: { action: string; outcome: string } & Record<string, unknown>): void {
    this.host.technicianAction(fields);
    this.emit('change');
  }

  private entry(ref: LockRef): WallEntry | undefined {
    return this.wall().find((w) => w.bus === ref.bus && w.board === ref.board && w.lock === ref.lock);
  }

  /** Opens one locker; CONFIRM (409) first when its item sensor shows a parcel or it is booked. */
  /** uncertain: the write to the board broke off, so the lock may or may not have pulsed (its door is watched) */
  async open(ref: LockRef, confirm: boolean): Promise<{ uncertain: boolean }> {
    const w = this.entry(ref);
    if (!w) {
      this.journal({ action: 'open', ...ref, outcome: 'UNKNOWN_LOCK' });
      throw new ActionError(404, 'UNKNOWN_LOCK', `no lock ${ref.bus}/${ref.board}/${ref.lock} on this terminal`);
    }
    const booked = w.shipmentState !== null || this.host.store.codeUsages().some((u) => key(u) === key(ref));
    if (!confirm && (w.item === true || booked)) {
      const reason = w.item === true ? 'item' : 'booked';
      throw new ActionError(409, 'CONFIRM', reason === 'item' ? 'the item sensor shows a parcel in this locker: confirm to open' : 'this locker is booked: confirm to open', { reason });
    }
    const r = await this.host.technicianOpen(ref);
    // OUTCOME_UNKNOWN: the write broke off; the lock may or may not have pulsed (watched as sent)
    this.journal({ action: 'open', ...ref, lockerUid: w.lockerUid, confirmed: confirm, outcome: r.ok ? (r.uncertain ? 'OUTCOME_UNKNOWN' : 'ok') : r.error });
    if (!r.ok) throw new ActionError(r.error === 'UNKNOWN_LOCK' ? 404 : 503, r.error, r.message);
    return { uncertain: r.uncertain === true };
  }

  private claim(what: string): void {
    if (this.busy) throw new ActionError(409, 'BUSY', `a ${this.busy} is under way; try again when it has finished`);
    this.busy = what;
  }

  /** Opens each lock in turn and waits for its door to open and close again (or a jam, or the timeout). */
  async doorTest(locks: LockRef[], timeoutMs: number): Promise<DoorTestResult[]> {
    this.claim('door test');
    const results: DoorTestResult[] = [];
    try {
      for (const ref of locks) results.push(await this.testDoor(ref, timeoutMs));
    } finally {
      this.busy = null;
    }
    this.journal({ action: 'door-test', locks, timeoutMs, results, outcome: results.every((r) => r.fault === null) ? 'ok' : 'faults' });
    return results;
  }

  private async testDoor(ref: LockRef, timeoutMs: number): Promise<DoorTestResult> {
    const res: DoorTestResult = { ...ref, opened: false, closed: false, itemSeen: null, ms: null, fault: null };
    const k = key(ref);
    const view = () => {
      try {
        return this.host.buses.bus(ref.bus).locks(ref.board)[ref.lock - 1] ?? null;
      } catch {
        return null;
      }
    };
    const seeItem = () => {
      const item = view()?.item;
      if (item === true) res.itemSeen = true;
      else if (item === false && res.itemSeen === null) res.itemSeen = false;
    };
    let done!: () => void;
    const finished = new Promise<void>((r) => (done = r));
    let t0 = Date.now();
    // this lock's events count from this test's own unlock on: the unlock waits behind the poll
    // under way, and that poll may still settle an earlier unlock of the same lock (a technician's
    // Open door, a code) as unobserved or jammed, or see its door open. The bus applies an unlock
    // to the board's state as it writes it (an earlier unlock pending is replaced), then emits
    // unlockSent: what follows is this unlock's.
    let sent = false;
    const mine = (e: unknown) => sent && key(e as LockRef) === k;
    const on: [keyof LockBusEvents, (e: any) => void][] = [
      ['unlockSent', (e) => key(e) === k && (sent = true)],
      ['doorOpened', (e) => mine(e) && ((res.opened = true), seeItem())],
      ['itemPlaced', (e) => mine(e) && (res.itemSeen = true)],
      [
        'doorClosed',
        (e) => {
          if (!mine(e) || !res.opened) return;
          seeItem();
          res.closed = true;
          res.ms = Date.now() - t0;
          done();
        },
      ],
      ['jam', (e) => mine(e) && ((res.fault = 'jam'), done())],
      // the driver could not watch this unlock (a poll failed during it) and reads the door shut
      // now: it settles the unlock without a jam (lockbus board-state.ts); the test ends here
      // rather than wait out its timeout
      [
        'unlockUnobserved',
        (e) => {
          if (!mine(e) || res.opened) return;
          res.opened = null;
          res.fault = 'unobserved';
          seeItem();
          done();
        },
      ],
      ['boardOffline', (e) => e.bus === ref.bus && e.board === ref.board && ((res.fault = 'board-offline'), done())],
    ];
    for (const [ev, fn] of on) this.host.buses.on(ev, fn);
    let timer: NodeJS.Timeout | null = null;
    try {
      seeItem();
      t0 = Date.now();
      const r = await this.host.technicianOpen(ref);
      if (!r.ok) {
        res.fault = r.error;
        return res;
      }
      if (r.alreadyOpen || view()?.door === 'open') res.opened = true;
      timer = setTimeout(done, timeoutMs);
      await finished;
      if (!res.fault && !res.closed) res.fault = res.opened ? 'not-closed' : 'not-opened';
      if (view()?.item === null && res.itemSeen === false) res.itemSeen = null;
      return res;
    } finally {
      if (timer) clearTimeout(timer);
      for (const [ev, fn] of on) this.host.buses.off(ev, fn);
      this.emit('change');
    }
  }

  /** Scans one bus with its polling paused (LockBus.scan), compared with the configured boards. */
  async busScan(bus: string): Promise<BusScanReport> {
    let expected: number[];
    try {
      expected = this.host.buses.bus(bus).boards;
    } catch {
      throw new ActionError(404, 'UNKNOWN_BUS', `no bus named ${bus} on this terminal`);
    }
    this.claim('bus scan');
    let scan;
    try {
      scan = await this.host.buses.scan(bus);
    } catch (err) {
      const code = err instanceof LockBusError ? err.code : 'ERROR';
      this.journal({ action: 'bus-scan', bus, outcome: code });
      if (code === 'BUSY') throw new ActionError(409, 'BUSY', (err as Error).message);
      throw new ActionError(503, 'BUS_UNAVAILABLE', (err as Error).message);
    } finally {
      this.busy = null;
    }
    const found = scan.filter((s) => s.result === 'answers').map((s) => s.address);
    const garbled = scan.filter((s) => s.result === 'garbled').map((s) => s.address);
    const report: BusScanReport = {
      bus,
      found,
      missing: expected.filter((a) => !found.includes(a) && !garbled.includes(a)),
      unexpected: found.filter((a) => !expected.includes(a)),
      garbled,
    };
    this.journal({ action: 'bus-scan', ...report, outcome: report.missing.length || report.unexpected.length || report.garbled.length ? 'differs' : 'ok' });
    return report;
  }

  /**
   * Waits for the next code presented at any reader and reports its type and length. The code is
   * taken out of the access path (Agent.credentialTap): not checked, not counted as a failure, not
   * journalled; its value goes nowhere.
   */
  async scannerTest(timeoutMs = 30_000): Promise<{ reader: string; type: 'qr' | 'keypad'; length: number }> {
    if (this.scanner.waitingSince) throw new ActionError(409, 'BUSY', 'a scanner test is waiting already');
    this.scanner = { ...this.scanner, waitingSince: new Date().toISOString() };
    this.emit('change');
    try {
      const got = await new Promise<{ reader: string; type: 'qr' | 'keypad'; length: number } | null>((resolve) => {
        const timer = setTimeout(() => {
          this.host.credentialTap = null;
          resolve(null);
        }, timeoutMs);
        this.host.credentialTap = (c) => {
          clearTimeout(timer);
          this.host.credentialTap = null;
          resolve({ reader: c.reader, type: c.source, length: c.value.length });
          return true;
        };
      });
      if (!got) {
        this.journal({ action: 'scanner-test', outcome: 'TIMEOUT' });
        throw new ActionError(408, 'TIMEOUT', `no code presented within ${Math.round(timeoutMs / 1000)} s`);
      }
      this.scanner = { ...this.scanner, last: { ...got, at: new Date().toISOString() } };
      this.journal({ action: 'scanner-test', reader: got.reader, type: got.type, length: got.length, outcome: 'ok' });
      return got;
    } finally {
      this.scanner = { ...this.scanner, waitingSince: null };
      this.emit('change');
    }
  }

  /** Asks the central service for a code snapshot now. */
  resync(): void {
    const sent = this.host.requestCodeSnapshot();
    this.journal({ action: 'resync', outcome: sent ? 'ok' : 'LINK_DOWN' });
    if (!sent) throw new ActionError(503, 'LINK_DOWN', 'no connection to the central service: the codes resync by themselves when it is back');
  }

  logs(limit: number): Record<string, unknown>[] {
    return this.host.logRing?.recent(limit) ?? [];
  }
}
