// The diagnostics page in headless Chromium (playwright-core driving /usr/bin/chromium) against a
// real agent on the simulator: it shows doors and items as the simulator has them, and the
// technician's "Open" pulses the lock only with the right password.
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

  it('sends security headers (CSP with hashes of its inline script and style); the page runs under them with no violation', async () => {
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
    expect(csp).toMatch(/script-src 'sha256-[A-Za-z0-9+/=]+'/);
    expect(csp).toMatch(/style-src 'sha256-[A-Za-z0-9+/=]+'/);
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

  it('shows lock states, and opens a lock for the technician with the right password only', async () => {
    w.lock(0, 2).putItem();
    w.lock(1, 1).openDoor();
    await waitFor(() => w.agent.buses.bus('bus0').locks(1)[0]!.door === 'open' && w.agent.buses.bus('bus0').locks(0)[1]!.item === true, 'agent sees the door and the item');
    const page = await browser.newPage({ viewport: { width: 1100, height: 1400 } });
    await page.goto(w.agent.diagnostics!.address!);
    const row = (board: number, lock: number) => page.locator(`table[data-board="${board}"] tr[data-lock="${lock}"]`);
    await expect.poll(() => row(1, 1).locator('td.door').textContent()).toBe('open');
    expect(await row(0, 2).locator('td.item').textContent()).toBe('item');
    expect(await row(0, 5).locator('td.door').textContent()).toBe('closed');
    expect(await page.locator('#terminal').textContent()).toBe('term-a1');
    expect(await page.locator('#mqtt').textContent()).toBe('connected');

    // wrong password: nothing opens
    await page.fill('#password', 'not-the-password');
    await row(0, 5).locator('button').click();
    await expect.poll(() => page.locator('#msg').textContent()).toContain('WRONG_PASSWORD');
    expect(w.lock(0, 5).state.doorOpen).toBe(false);

    await page.fill('#password', 'tech-password-1');
    await row(0, 5).locator('button').click();
    await expect.poll(() => page.locator('#msg').textContent()).toBe('Opened bus0/0/5');
    await waitFor(() => w.lock(0, 5).state.doorOpen, 'lock 0/5 open');
    await expect.poll(() => row(0, 5).locator('td.door').textContent(), { timeout: 5000 }).toBe('open');
    await waitFor(() => w.events().some((e) => e.type === 'unlockSent' && e.cause === 'technician' && e.lock === 5), 'technician unlock reported');
    const shot = path.join(os.tmpdir(), 'agent-diagnostics.png');
    await page.screenshot({ path: shot, fullPage: true });
    expect(fs.statSync(shot).size).toBeGreaterThan(1000);
  });
});
