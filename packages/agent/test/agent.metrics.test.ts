// Issue 13 part 5, the agent: its Prometheus metrics on a listener of its own, scraped over HTTP
// from a real agent driving the simulated boards (socat ptys) and connected to the real embedded
// broker: bus transactions per board and outcome (timeouts, bad checksums), door events by type,
// jams, boards online, the journal backlog, the broker link, the codes held and their age.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { World, codeEntry, sleep, waitFor } from './support/world';
import { familiesOf, parsePromText, sumOf, type PromSample } from '../../central/test/support/prom-text';
import { AgentMetrics } from '../src/metrics';
import { loadAgentConfig } from '../src/config';

describe('agent metrics (real agent + simulator + broker)', () => {
  let w: World;
  let base: string;
  const scrapeText = async () => {
    const res = await fetch(`${base}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    return res.text();
  };
  const scrape = async (): Promise<PromSample[]> => parsePromText(await scrapeText());
  const until = async (what: string, pred: (s: PromSample[]) => boolean, ms = 8000) => {
    const start = Date.now();
    for (;;) {
      const s = await scrape();
      if (pred(s)) return s;
      if (Date.now() - start > ms) throw new Error(`timed out waiting for ${what}`);
      await sleep(50);
    }
  };

  beforeAll(async () => {
    w = await World.create({ metrics: { enabled: true, host: '127.0.0.1', port: 0 } });
    base = w.agent.metricsServer!.address()!;
    await w.snapshot([codeEntry('c-drop', 'DropOff', 'QR-M-DROP', { board: 0, lock: 3 }), codeEntry('c-jam', 'DropOff', 'QR-M-JAM', { board: 0, lock: 5 })], 1);
  });
  afterAll(async () => {
    await w?.close();
  });

  it('serves its metrics on its own port: link up, boards online, codes held, transactions counted per board', async () => {
    expect(base).not.toContain(`:${w.config.diagnostics.port}`);
    const text = await scrapeText();
    const fam = familiesOf(text);
    expect(fam.get('locker_agent_bus_transactions_total')).toBe('counter');
    expect(fam.get('locker_agent_journal_unsent')).toBe('gauge');
    const s = parsePromText(text);
    expect(sumOf(s, 'locker_agent_mqtt_connected')).toBe(1);
    expect(sumOf(s, 'locker_agent_board_online', { bus: 'bus0', board: '0' })).toBe(1);
    expect(sumOf(s, 'locker_agent_board_online', { bus: 'bus0', board: '1' })).toBe(1);
    expect(sumOf(s, 'locker_agent_bus_port_open', { bus: 'bus0' })).toBe(1);
    expect(sumOf(s, 'locker_agent_codes_held')).toBe(2);
    expect(sumOf(s, 'locker_agent_codes_age_seconds')).toBe(0);
    expect(sumOf(s, 'locker_agent_bus_transactions_total', { bus: 'bus0', board: '0', outcome: 'ok' })).toBeGreaterThan(0);
    expect(sumOf(s, 'locker_agent_bus_transactions_total', { bus: 'bus0', board: '1', outcome: 'ok' })).toBeGreaterThan(0);
    expect(fam.has('process_cpu_user_seconds_total')).toBe(true);
    // no code value or code id in the labels
    expect(text).not.toContain('QR-M-DROP');
    expect(text).not.toContain('c-drop');
    expect((await fetch(`${base}/`)).status).toBe(404);
  });

  it('a door cycle counts its door events; a jam is counted', async () => {
    const before = await scrape();
    await w.sim.scanner('scan0').scan('QR-M-DROP');
    await waitFor(() => w.lock(0, 3).state.doorOpen, 'lock 0/3 open');
    await waitFor(() => w.events().some((e) => e.type === 'doorOpened' && e.lock === 3), 'doorOpened');
    w.lock(0, 3).putItem();
    w.lock(0, 3).closeDoor();
    await waitFor(() => w.events().some((e) => e.type === 'dropOff'), 'dropOff');
    const after = await scrape();
    const moved = (name: string, m: Record<string, string>) => sumOf(after, name, m) - sumOf(before, name, m);
    expect(moved('locker_agent_door_events_total', { bus: 'bus0', board: '0', type: 'doorOpened' })).toBe(1);
    expect(moved('locker_agent_door_events_total', { bus: 'bus0', board: '0', type: 'itemPlaced' })).toBe(1);
    expect(moved('locker_agent_door_events_total', { bus: 'bus0', board: '0', type: 'doorClosed' })).toBe(1);

    // a jammed door: the unlock is taken but the door never moves (jamWindowMs 1.5 s)
    w.sim.bus('bus0').faults.set({ jammedDoor: [{ board: 0, lock: 5 }] });
    await w.sim.scanner('scan0').scan('QR-M-JAM');
    await until('a jam', (s) => sumOf(s, 'locker_agent_jams_total', { bus: 'bus0', board: '0' }) - sumOf(before, 'locker_agent_jams_total', { bus: 'bus0', board: '0' }) === 1);
    w.sim.bus('bus0').faults.clear();
  });

  it('bad checksums and timeouts are counted per board; a board that stops answering shows offline', async () => {
    const before = await scrape();
    const bus = w.sim.bus('bus0');
    bus.faults.set({ badChecksum: true });
    await until('bad checksums on board 1', (s) => sumOf(s, 'locker_agent_bus_transactions_total', { bus: 'bus0', board: '1', outcome: 'BAD_CHECKSUM' }) > sumOf(before, 'locker_agent_bus_transactions_total', { bus: 'bus0', board: '1', outcome: 'BAD_CHECKSUM' }));
    bus.faults.clear();
    bus.faults.set({ offlineBoards: [1] });
    const off = await until('board 1 offline', (s) => sumOf(s, 'locker_agent_board_online', { bus: 'bus0', board: '1' }) === 0);
    expect(sumOf(off, 'locker_agent_bus_transactions_total', { bus: 'bus0', board: '1', outcome: 'NO_REPLY' })).toBeGreaterThan(sumOf(before, 'locker_agent_bus_transactions_total', { bus: 'bus0', board: '1', outcome: 'NO_REPLY' }));
    expect(sumOf(off, 'locker_agent_board_online', { bus: 'bus0', board: '0' })).toBe(1);
    bus.faults.clear();
    await until('board 1 online again', (s) => sumOf(s, 'locker_agent_board_online', { bus: 'bus0', board: '1' }) === 1);
  });

  it('the journal backlog grows while the central does not acknowledge; the link down shows 0 and the codes age', async () => {
    w.ackEvents = false;
    w.lock(0, 4).openDoor(); // forced open (no unlock): events to journal
    await until('unsent events', (s) => sumOf(s, 'locker_agent_journal_unsent') > 0);
    await w.stopBroker();
    await until('link down', (s) => sumOf(s, 'locker_agent_mqtt_connected') === 0);
    await sleep(1100);
    const s = await scrape();
    expect(sumOf(s, 'locker_agent_codes_age_seconds')).toBeGreaterThanOrEqual(1);
    expect(sumOf(s, 'locker_agent_journal_unsent')).toBeGreaterThan(0);
  });
});

describe('agent metrics: doors left open', () => {
  it('a door reported left open counts until it closes', async () => {
    const m = new AgentMetrics({ journalUnsent: () => 0, mqttConnected: () => true, codesHeld: () => 0, codesAgeSeconds: () => 0, boards: () => [{ bus: 'bus0', portOpen: true, boards: [{ address: 0, online: true }] }] });
    const left = async () => sumOf(parsePromText(await m.registry.metrics()), 'locker_agent_doors_left_open', { bus: 'bus0' });
    expect(await left()).toBe(0);
    m.busEvent('doorLeftOpen', { bus: 'bus0', board: 0, lock: 2 });
    m.busEvent('doorLeftOpen', { bus: 'bus0', board: 0, lock: 3 });
    expect(await left()).toBe(2);
    m.busEvent('doorClosed', { bus: 'bus0', board: 0, lock: 2 });
    expect(await left()).toBe(1);
    expect(sumOf(parsePromText(await m.registry.metrics()), 'locker_agent_door_events_total', { type: 'doorLeftOpen' })).toBe(2);
  });

  it('metrics are off by default; on, they need a port of their own', () => {
    const base = { terminal: { id: 't', secret: 's' } };
    expect(loadAgentConfig({ env: {}, overrides: base }).metrics).toEqual({ enabled: false, host: '127.0.0.1', port: 9465 });
    expect(loadAgentConfig({ env: { LOCKER_AGENT_METRICS_ENABLED: 'true', LOCKER_AGENT_METRICS_PORT: '9470' }, overrides: base }).metrics).toMatchObject({ enabled: true, port: 9470 });
    expect(() => loadAgentConfig({ env: {}, overrides: { ...base, metrics: { enabled: true, port: 8090 } } })).toThrow(/metrics\.port/);
  });
});
