// The technician's page (packages/agent/src/page/) in headless Chromium (playwright-core driving
// /usr/bin/chromium) at a phone's 390 px, against a REAL agent on the simulator: the agent is
// configured for boards 0, 1 and 2 of bus0 while the simulator has boards 0, 1 and 3 (2 is
// missing, 3 is unexpected). The test logs in, sees the wall with the names pushed on down/lockers
// (and the board/lock fallback where none is), opens a locker with a parcel inside through the
// confirmation, runs a door test over 4 lockers with one jammed, a bus scan, a scanner test,
// a resync and the log view, checks that nothing is cut off at 390 px and that the page runs
// under its Content-Security-Policy with no violation, and saves the screenshots of docs/agent.md
// ("Technician's guide") under docs/images/ when LOCKER_UPDATE_SCREENSHOTS=1.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { codeEntry, World, sleep, waitFor } from './support/world';
import { createAgentLogger } from '../src/logger';

const CHROMIUM = '/usr/bin/chromium';
// the screenshots of docs/agent.md are rewritten only on request (LOCKER_UPDATE_SCREENSHOTS=1): every
// run differs (times, temp paths), and a test run must not dirty the tree; otherwise into a temp dir
const IMAGES =
  process.env.LOCKER_UPDATE_SCREENSHOTS === '1' ? path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../docs/images') : path.join(os.tmpdir(), 'technician-page-screenshots');
const PASSWORD = 'tech-password-1';
const WIDTH = 390;
// Skipped without Chromium on a developer machine; CI (LOCKER_REQUIRE_SERVICES=1) installs it and requires it.
const d = fs.existsSync(CHROMIUM) || process.env.LOCKER_REQUIRE_SERVICES === '1' ? describe : describe.skip;

const size = (code: string) => ({ code, width: 40, height: code === 'S' ? 10 : code === 'M' ? 20 : 40, length: 60 });
/** names for boards 0 and 1 (A01.., B01..); board 2 (configured, missing) has none: its tiles show board/lock */
function lockerList() {
  const lockers = [];
  for (const board of [0, 1]) {
    for (let lock = 1; lock <= 16; lock++) {
      lockers.push({
        uid: `locker-${board}-${lock}`,
        name: `${board === 0 ? 'A' : 'B'}${String(lock).padStart(2, '0')}`,
        size: size(lock <= 8 ? 'S' : lock <= 14 ? 'M' : 'L'),
        serviceState: board === 1 && lock === 16 ? 'outOfService' : 'active',
        bus: 'bus0',
        board,
        lock,
        shipmentState: board === 0 && lock === 6 ? 'ReadyForDropoff' : null,
      });
    }
  }
  return { v: 1, epoch: 'epoch-1', version: 1, at: new Date().toISOString(), lockers };
}

/** Buttons that are visible and not inside a closed dialog: each lies inside the viewport's width and is at least 44 px tall. */
async function layoutProblems(page: Page): Promise<string[]> {
  return page.evaluate((width) => {
    const out: string[] = [];
    const sw = document.documentElement.scrollWidth;
    if (sw > width) out.push(`document.scrollWidth ${sw} > ${width}`);
    if (document.body.scrollWidth > width) out.push(`body.scrollWidth ${document.body.scrollWidth} > ${width}`);
    for (const b of Array.from(document.querySelectorAll('button, input, summary'))) {
      const r = b.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) continue; // not displayed
      const what = `${b.tagName.toLowerCase()} "${(b.textContent ?? '').trim().slice(0, 30) || (b as HTMLElement).id}"`;
      if (r.left < 0 || r.right > width + 0.5) out.push(`${what} outside the viewport: ${r.left}..${r.right}`);
      if (b.tagName !== 'SUMMARY' && (r.height < 44 || r.width < 44)) out.push(`${what} smaller than 44 px: ${r.width}x${r.height}`);
    }
    return out;
  }, WIDTH);
}

d(`technician's page in headless Chromium at ${WIDTH} px${fs.existsSync(CHROMIUM) ? '' : ' (SKIPPED: no /usr/bin/chromium)'}`, () => {
  let w: World;
  let browser: Browser;
  let page: Page;
  const violations: string[] = [];
  const pageErrors: string[] = [];
  /** a failed test must not leave a dialog over the page for the next one */
  const closeDialogs = () => page.evaluate(() => document.querySelectorAll('dialog[open]').forEach((d) => (d as HTMLDialogElement).close()));
  const tile = (board: number, lock: number) => page.locator(`#wall button.locker[data-board="${board}"][data-lock="${lock}"]`);

  beforeAll(async () => {
    fs.mkdirSync(IMAGES, { recursive: true });
    // the agent's own logger (into a sink): the log view shows its lines
    const log = createAgentLogger({ level: 'info', terminalId: 'term-a1', destination: { write: () => true } as any });
    w = await World.create(
      { diagnostics: { enabled: true, host: '127.0.0.1', port: 0, technicianPassword: PASSWORD, timeZone: 'Europe/Amsterdam' } as any },
      // a longer reply timeout than the other worlds': this process also drives Chromium, and a
      // status answered after the timeout is a failed poll (during the door test's unlock of the
      // jammed B04 that makes it "not observed" instead of "jammed": the door test's own test in
      // technician-api.test.ts)
      { simBoards: [0, 1, 3], agentBoards: [0, 1, 2], log, busTiming: { replyTimeoutMs: 250 } },
    );
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    page = await browser.newPage({ viewport: { width: WIDTH, height: 844 }, deviceScaleFactor: 1, hasTouch: true, isMobile: true });
    page.on('console', (m) => {
      if (/Content Security Policy|Refused to/i.test(m.text())) violations.push(m.text());
    });
    page.on('pageerror', (e) => pageErrors.push(e.message));
    await page.addInitScript(() => {
      document.addEventListener('securitypolicyviolation', (e) => console.error(`Refused to (CSP violation) ${e.violatedDirective} ${e.blockedURI}`));
    });
  }, 60_000);
  afterAll(async () => {
    // a browser that does not close within 10 s is left to the process exit: it must not hold the agent's stop
    await Promise.race([browser?.close(), new Promise((r) => setTimeout(r, 10_000))]);
    await w?.close();
  });

  it('serves the page and its files under a strict CSP (no inline script or style); logs in once', async () => {
    const res = await page.goto(w.agent.diagnostics!.address!);
    const csp = res!.headers()['content-security-policy'] ?? '';
    expect(csp).toContain("default-src 'none'");
    expect(csp).not.toContain('unsafe-inline');
    expect(csp).not.toContain('unsafe-eval');
    expect(csp).toContain("frame-ancestors 'none'");
    for (const asset of ['app.js', 'app.css']) {
      const r = await fetch(new URL(asset, w.agent.diagnostics!.address! + '/'));
      expect(r.status, asset).toBe(200);
    }
    // the page is served whole by the agent: no CDN, nothing from another origin
    const html = await (await fetch(w.agent.diagnostics!.address!)).text();
    expect(html).not.toMatch(/https?:\/\//);
    expect(html).not.toMatch(/<script>[^<]|<style>|\sstyle=|\son[a-z]+=/i);

    // a wrong password first: refused, no session
    await page.fill('#password', 'not-the-password');
    await page.click('#login');
    await expect.poll(() => page.locator('#login-msg').textContent()).toContain('Wrong password');
    expect(await page.locator('#tools').isVisible()).toBe(false);

    await page.fill('#password', PASSWORD);
    await page.click('#login');
    await page.locator('#session').waitFor({ state: 'visible' });
    expect(await page.locator('#login-panel').isVisible()).toBe(false);
    // the session's end, in the PUP's time zone with UTC on hover
    const expiry = page.locator('#session-expiry time');
    const title = await expiry.getAttribute('title');
    expect(title).toMatch(/^\d{4}-\d\d-\d\dT.*Z UTC$/);
    // the end in the PUP's time zone (Europe/Amsterdam here); a session that ends on the next day
    // there (logged in within its length of local midnight) shows that day too: "28 Nov, 00:22"
    const localEnd = new Date(title!.replace(/ UTC$/, '')).toLocaleTimeString('en-GB', { timeZone: 'Europe/Amsterdam', hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });
    const shown = await expiry.textContent();
    expect(shown).toMatch(/^(\d{1,2} [A-Z][a-z]{2}, )?\d\d:\d\d$/);
    expect(shown!.slice(-5)).toBe(localEnd);
    expect(await page.locator('#terminal').textContent()).toBe('term-a1');
    await expect.poll(() => page.locator('#mqtt').textContent()).toBe('connected');
  });

  it('shows the wall: names and sizes pushed on down/lockers, board/lock where none, live states, board 2 offline', async () => {
    await w.publish('lockers', lockerList());
    await w.snapshot([codeEntry('c-6', 'DropOff', 'QR-DROP-0-6', { board: 0, lock: 6, uid: 'locker-0-6' })]);
    await expect.poll(() => tile(0, 1).locator('.name').textContent(), { timeout: 8000 }).toBe('A01');
    expect(await tile(0, 1).locator('.size').textContent()).toBe('S');
    expect(await tile(1, 12).locator('.name').textContent()).toBe('B12');
    expect(await tile(1, 12).locator('.size').textContent()).toBe('M');
    expect(await tile(0, 1).getAttribute('data-status')).toBe('free');
    expect(await tile(0, 1).locator('.st').textContent()).toBe('free');
    // no name for the missing board 2: board/lock; its locks are faulty (board offline)
    expect(await tile(2, 5).locator('.name').textContent()).toBe('2/5');
    await expect.poll(() => tile(2, 5).locator('.st').textContent(), { timeout: 8000 }).toBe('fault: board offline');
    expect(await page.locator('#wall .board[data-board="2"] .board-head').textContent()).toContain('offline');
    // the booked locker (a DropOff code held) with its shipment state; the out-of-service one
    await expect.poll(() => tile(0, 6).getAttribute('data-status')).toBe('booked');
    expect(await tile(0, 6).locator('.ship').textContent()).toBe('ready for dropoff');
    expect(await tile(1, 16).locator('.svc').textContent()).toBe('out of service');
    // the header: codes version, backlog, scanners
    expect(await page.locator('#codes-detail').textContent()).toBe('version 1 (epoch epoch-1)');
    expect(await page.locator('#scanners').textContent()).toMatch(/^1 /);
    expect(await page.locator('#scanners-detail').textContent()).toContain('scan0');

    // pushed, not polled: a parcel put in and a door opened at the wall show up by themselves
    const stateRequests: string[] = [];
    page.on('request', (r) => {
      if (r.url().endsWith('/api/state')) stateRequests.push(r.url());
    });
    // a parcel goes into 0/2 through an opened door (into a shut locker it would be a forced opening)
    expect((await w.agent.technicianOpen({ bus: 'bus0', board: 0, lock: 2 })).ok).toBe(true);
    await waitFor(() => w.lock(0, 2).state.doorOpen, 'locker 0/2 open');
    await expect.poll(() => tile(0, 2).getAttribute('data-status'), { timeout: 8000 }).toBe('open');
    expect(await tile(0, 2).locator('.st').textContent()).toBe('door open');
    w.lock(0, 2).putItem();
    w.lock(0, 2).closeDoor();
    w.lock(1, 1).openDoor(); // by hand: a forced opening
    await expect.poll(() => tile(0, 2).getAttribute('data-status'), { timeout: 8000 }).toBe('occupied');
    await expect.poll(() => tile(1, 1).getAttribute('data-status'), { timeout: 8000 }).toMatch(/^(open|fault)$/);
    expect(await tile(1, 1).locator('.st').textContent()).toMatch(/^(door open|fault: forced open)$/);
    expect(stateRequests).toEqual([]);
    // recent events: times in the PUP's time zone, UTC on hover
    await page.locator('#events-box summary').click();
    const t = page.locator('#events time').first();
    await t.waitFor();
    expect(await t.getAttribute('title')).toMatch(/Z UTC$/);
    await page.locator('#events-box summary').click();
    expect(await layoutProblems(page)).toEqual([]);
    await page.screenshot({ path: path.join(IMAGES, 'technician-wall.png'), fullPage: true });
    w.lock(1, 1).closeDoor();
  });

  it('opens a locker with a parcel inside only after the confirmation; a booked one asks too', async () => {
    await closeDialogs();
    // booked: the confirmation names the booking; Cancel opens nothing
    await tile(0, 6).click();
    await page.locator('#sheet').waitFor({ state: 'visible' });
    expect(await page.locator('#sheet-title').textContent()).toBe('Locker A06');
    expect(await layoutProblems(page)).toEqual([]);
    await page.click('#sheet-open');
    await page.locator('#confirm').waitFor({ state: 'visible' });
    expect(await page.locator('#confirm-text').textContent()).toContain('booked');
    await page.click('#confirm-no');
    await sleep(300);
    expect(w.lock(0, 6).state.doorOpen).toBe(false);
    await page.click('#sheet-close');

    // a parcel inside (put there in the previous test): the dialog says so; Open anyway opens
    await tile(0, 2).click();
    await page.locator('#sheet').waitFor({ state: 'visible' });
    expect(await page.locator('#sheet-facts').textContent()).toContain('parcel seen');
    await page.click('#sheet-open');
    await page.locator('#confirm').waitFor({ state: 'visible' });
    expect(await page.locator('#confirm-text').textContent()).toContain('There is a parcel inside locker A02');
    expect(w.lock(0, 2).state.doorOpen).toBe(false); // nothing opened before the confirmation
    await page.click('#confirm-yes');
    await expect.poll(() => page.locator('#sheet-msg').textContent()).toBe('Opened A02.');
    await waitFor(() => w.lock(0, 2).state.doorOpen, 'locker 0/2 open');
    await expect.poll(() => tile(0, 2).getAttribute('data-status'), { timeout: 8000 }).toBe('open');
    await page.click('#sheet-close');
    w.lock(0, 2).takeItem();
    w.lock(0, 2).closeDoor();
    await expect.poll(() => tile(0, 2).getAttribute('data-status'), { timeout: 8000 }).toBe('free');
  });

  it('an open whose write to the board broke off says it is not sure and asks to check the door', async () => {
    await closeDialogs();
    await tile(0, 12).click();
    await page.locator('#sheet').waitFor({ state: 'visible' });
    await w.whileUnlockWriteBreaks(0, 12, true, async () => {
      await page.click('#sheet-open');
      await expect.poll(() => page.locator('#sheet-msg').textContent()).toContain('Not sure A12 opened');
    });
    expect(await page.locator('#sheet-msg').getAttribute('class')).toContain('warn');
    await waitFor(() => w.lock(0, 12).state.doorOpen || !w.lock(0, 12).state.latched, 'the board pulsed 0/12');
    await page.click('#sheet-close');
    if (w.lock(0, 12).state.doorOpen) w.lock(0, 12).closeDoor();
  });

  it('runs a door test over 4 lockers and reports the jammed one as a fault', async () => {
    await closeDialogs();
    w.sim.bus('bus0').faults.set({ jammedDoor: [{ board: 1, lock: 4 }] });
    const picked: [number, number][] = [
      [0, 3],
      [0, 4],
      [1, 3],
      [1, 4],
    ];
    // the technician at the wall: shuts each door once it sprang open and the agent saw it open
    const agentSeesOpen = (b: number, l: number) => w.agent.buses.bus('bus0').locks(b)[l - 1]?.door === 'open';
    const closer = setInterval(() => {
      for (const [b, l] of picked) if (w.lock(b, l).state.doorOpen && agentSeesOpen(b, l)) w.lock(b, l).closeDoor();
    }, 100);
    try {
      await page.click('#doortest-start');
      await page.locator('#select-bar').waitFor({ state: 'visible' });
      for (const [b, l] of picked) await tile(b, l).click();
      expect(await page.locator('#select-count').textContent()).toBe('4 lockers selected');
      expect(await page.locator('#sheet').isVisible()).toBe(false); // selecting, not opening
      expect(await layoutProblems(page)).toEqual([]);
      await page.click('#doortest-run');
      const table = page.locator('#doortest-result');
      await table.waitFor({ state: 'visible', timeout: 60_000 });
    } finally {
      clearInterval(closer);
    }
    const row = (b: number, l: number) => page.locator(`#doortest-result tr[data-key="bus0|${b}|${l}"]`);
    const cells = async (b: number, l: number) => (await row(b, l).locator('td').allTextContents()).map((s) => s.trim());
    for (const [b, l] of picked.slice(0, 3)) {
      const c = await cells(b, l);
      expect(c[0]).toBe(`${b === 0 ? 'A' : 'B'}0${l}`);
      expect(c.slice(1, 4)).toEqual(['yes', 'yes', 'no']); // opened, closed, no item seen
      expect(c[4]).toMatch(/^\d+\.\d s$/);
      expect(c[5]).toBe('ok');
    }
    const jam = await cells(1, 4);
    expect(jam[0]).toBe('B04');
    expect(jam[1]).toBe('no'); // never opened
    expect(jam[5]).toBe('jammed');
    expect(await row(1, 4).getAttribute('class')).toContain('fault');
    expect(await page.locator('#doortest-title').textContent()).toContain('3 passed, 1 with a fault');
    expect(await layoutProblems(page)).toEqual([]);
    await page.locator('#tools').screenshot({ path: path.join(IMAGES, 'technician-door-test.png') });
    w.sim.bus('bus0').faults.set({ jammedDoor: [] });
  }, 90_000);

  it('scans the bus: board 2 missing, board 3 unexpected; polling resumes', async () => {
    await closeDialogs();
    await page.click('#wall button[data-scan="bus0"]');
    const box = page.locator('#wall [data-scan-result="bus0"]');
    await box.locator('.found').waitFor({ timeout: 30_000 });
    expect(await box.locator('.found').textContent()).toMatch(/found\s+0, 1, 3$/);
    expect(await box.locator('.missing').textContent()).toMatch(/missing\s+2\b/);
    expect(await box.locator('.unexpected').textContent()).toMatch(/unexpected\s+3\b/);
    expect(await box.locator('.garbled').textContent()).toMatch(/garbled\s+none/);
    expect(await layoutProblems(page)).toEqual([]);
    await box.scrollIntoViewIfNeeded();
    // the bus's head, the scan result and the first rows of board 0 (page coordinates)
    const top = await page.locator('#wall .bus[data-bus="bus0"]').evaluate((e) => e.getBoundingClientRect().top + window.scrollY);
    const bottom = await box.evaluate((e) => e.getBoundingClientRect().bottom + window.scrollY);
    await page.screenshot({ path: path.join(IMAGES, 'technician-bus-scan.png'), fullPage: true, clip: { x: 0, y: top - 8, width: WIDTH, height: bottom - top + 200 } });
    // the agent polls again after the scan: a door opened now is seen
    w.lock(0, 9).openDoor();
    await expect.poll(() => tile(0, 9).getAttribute('data-status'), { timeout: 8000 }).not.toBe('free');
    w.lock(0, 9).closeDoor();
  }, 60_000);

  it('tests the scanner: type and length only, never the value, and no door opens', async () => {
    await closeDialogs();
    const before = w.events().length;
    const value = 'QR-TEST-9F8E7D6C5B';
    const req = page.waitForRequest((r) => r.url().endsWith('/api/actions/scanner-test'));
    await page.click('#scanner-test');
    await req;
    await page.locator('#scanner-waiting').waitFor();
    await sleep(300); // the agent takes the next read from now on
    await w.sim.scanner('scan0').scan(value);
    const result = page.locator('#scanner-result');
    await result.waitFor({ timeout: 10_000 });
    expect(await result.getAttribute('class')).toContain('ok');
    expect(await result.locator('.length').textContent()).toBe(String(value.length));
    expect((await result.locator('.type').textContent())!.length).toBeGreaterThan(0);
    expect(await page.content()).not.toContain(value);
    await sleep(500);
    for (let b = 0; b <= 1; b++) for (let l = 1; l <= 16; l++) expect(w.lock(b, l).state.doorOpen, `${b}/${l}`).toBe(false);
    expect(w.events().slice(before).filter((e) => e.type === 'unlockSent' || e.type === 'credentialAccepted' || e.type === 'credentialRefused' || e.type === 'doorOpened')).toEqual([]);
  });

  it('resyncs the codes (a snapshot request reaches the central side) and shows the log', async () => {
    await closeDialogs();
    const before = w.received.filter((r) => r.kind === 'sync').length;
    await page.click('#resync');
    await expect.poll(() => page.locator('#resync-result').getAttribute('class')).toContain('ok');
    await waitFor(() => w.received.filter((r) => r.kind === 'sync').length > before, 'a sync request');

    await page.click('#logs-open');
    await page.locator('#logs').waitFor({ state: 'visible' });
    await expect.poll(() => page.locator('#logs-lines > div').count()).toBeGreaterThan(3);
    const text = (await page.locator('#logs-lines').textContent()) ?? '';
    expect(text).toMatch(/INFO/);
    expect(text).not.toContain(PASSWORD);
    expect(await layoutProblems(page)).toEqual([]);
    await page.click('#logs-close');
  });

  it('logs out: the session is gone, actions are refused', async () => {
    await closeDialogs();
    await page.click('#logout');
    await page.locator('#login-panel').waitFor({ state: 'visible' });
    expect(await page.locator('#tools').isVisible()).toBe(false);
    const r = await page.evaluate(async () => (await fetch('/api/actions/resync', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })).status);
    expect(r).toBe(401);
    expect(await layoutProblems(page)).toEqual([]);
    expect(violations).toEqual([]);
    expect(pageErrors).toEqual([]);
  });
});
