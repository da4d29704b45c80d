// The diagnostics page in headless Chromium (playwright-core driving /usr/bin/chromium) against a
// real agent on the simulator: it shows doors and items as the simulator has them (read-only on
// loopback), and the technician's "Open" pulses the lock only after a login with the right
// password. The whole technician's page at a phone's width: technician-page.test.ts.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { World, waitFor } from './support/world';

const CHROMIUM = '/usr/bin/chromium';
// Skipped without Chromium on a developer machine; CI (LOCKER_REQUIRE_SERVICES=1) installs it and requires it.
const d = fs.existsSync(CHROMIUM) || process.env.LOCKER_REQUIRE_SERVICES === '1' ? describe : describe.skip;

d(`diagnostics page in headless Chromium${fs.existsSync(CHROMIUM) ? '' : ' (SKIPPED: no /usr/bin/chromium)'}`, () => {
  let w: World;
  let browser: Browser;
  beforeAll(async () => {
    w = await World.create();
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
  });
  afterAll(async () => {
    await browser?.close();
    await w?.close();
  });

  it('sends security headers (CSP: script and style from this origin only, nothing inline); the page runs under them with no violation', async () => {
    const page = await browser.newPage();
    const violations: string[] = [];
    page.on('console', (m) => {
      if (/Content Security Policy|Refused to/i.test(m.text())) violations.push(m.text());
    });
    await page.addInitScript(() => {
      document.addEventListener('securitypolicyviolation', (e) => console.error(`Refused to (CSP violation) ${e.violatedDirective} ${e.blockedURI}`));
    });
    const res = await page.goto(w.agent.diagnostics!.address!);
    const h = res!.headers();
    const csp = h['content-security-policy'] ?? '';
    expect(csp).toContain("default-src 'none'");
    // the page's script and style are files of this origin (src/page/), nothing inline
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("style-src 'self'");
    expect(csp).toContain("frame-ancestors 'none'");
    expect(csp).not.toContain('unsafe-inline');
    expect(h['x-content-type-options']).toBe('nosniff');
    expect(h['x-frame-options']).toBe('DENY');
    expect(h['referrer-policy']).toBe('no-referrer');
    expect(h['x-powered-by']).toBeUndefined();
    // the script ran (it fills the terminal id from /api/state) and the style applied
    await expect.poll(() => page.locator('#terminal').textContent()).toBe('term-a1');
    expect(await page.evaluate(() => getComputedStyle(document.body).backgroundColor)).toBe('rgb(246, 247, 249)');
    // the JSON answers carry the headers too
    const api = await fetch(`${w.agent.diagnostics!.address!}/api/state`);
    expect(api.headers.get('x-content-type-options')).toBe('nosniff');
    expect(violations).toEqual([]);
    await page.close();
  });

  it('shows lock states on the wall (read-only on loopback), and opens a lock for the technician after a login only', async () => {
    w.lock(0, 2).putItem(); // into a shut locker: the agent calls it a forced opening
    w.lock(1, 1).openDoor();
    await waitFor(() => w.agent.buses.bus('bus0').locks(1)[0]!.door === 'open' && w.agent.buses.bus('bus0').locks(0)[1]!.item === true, 'agent sees the door and the item');
    const page = await browser.newPage({ viewport: { width: 1100, height: 1400 } });
    await page.goto(w.agent.diagnostics!.address!);
    const tile = (board: number, lock: number) => page.locator(`#wall button.locker[data-board="${board}"][data-lock="${lock}"]`);
    await expect.poll(() => tile(1, 1).locator('.st').textContent()).toMatch(/^(door open|fault: forced open)$/);
    await expect.poll(() => tile(0, 2).locator('.st').textContent()).toMatch(/^(occupied|fault: forced open)$/);
    expect(await tile(0, 5).getAttribute('data-status')).toBe('free');
    expect(await page.locator('#terminal').textContent()).toBe('term-a1');
    expect(await page.locator('#mqtt').textContent()).toBe('connected');

    // not logged in (loopback may read): the locker's sheet shows it, but cannot open it
    await tile(0, 5).click();
    expect(await page.locator('#sheet-open').isDisabled()).toBe(true);
    expect(await page.locator('#sheet-msg').textContent()).toBe('Log in to open doors.');
    await page.click('#sheet-close');

    // wrong password: no session, nothing opens
    await page.fill('#password', 'not-the-password');
    await page.click('#login');
    await expect.poll(() => page.locator('#login-msg').textContent()).toBe('Wrong password.');
    expect(await page.locator('#session').isVisible()).toBe(false);

    await page.fill('#password', 'tech-password-1');
    await page.click('#login');
    await page.locator('#session').waitFor({ state: 'visible' });
    await tile(0, 5).click();
    await page.click('#sheet-open');
    await expect.poll(() => page.locator('#sheet-msg').textContent()).toBe('Opened 0/5.');
    await waitFor(() => w.lock(0, 5).state.doorOpen, 'lock 0/5 open');
    await expect.poll(() => tile(0, 5).getAttribute('data-status'), { timeout: 5000 }).toBe('open');
    await waitFor(() => w.events().some((e) => e.type === 'unlockSent' && e.cause === 'technician' && e.lock === 5), 'technician unlock reported');
    await waitFor(() => w.events().some((e) => e.type === 'technicianAction' && e.action === 'open' && e.lock === 5 && e.outcome === 'ok'), 'technician action reported');
    await page.click('#sheet-close');
    const shot = path.join(os.tmpdir(), 'agent-diagnostics.png');
    await page.screenshot({ path: shot, fullPage: true });
    expect(fs.statSync(shot).size).toBeGreaterThan(1000);
  });
});
