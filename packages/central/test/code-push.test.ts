// Revocations reach the terminals when they happen (docs/edge-protocol.md, "Code pushes"): the
// shipment service calls notifyCodesChanged after a commit that changed codes, so a cancel is
// pushed at once even though the marker poll and the reconcile are far away; and the marker
// itself changes on every invalidation, even two at the same timestamp (the clock is not
// advanced here). Both engines.
import type { MqttClient } from 'mqtt';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { waitFor } from './support/wait';
import { connectScriptedTerminal, terminalStatus, type ScriptedTerminal } from './support/scripted-terminal';
import { PUP_A1 } from './support/fixtures';
import { addUser, booking, ok } from './shipments-helpers';
import { EdgeSync } from '../src/edge/sync';

describeEngines('code push on change', (engine) => {
  let t: TestService;
  let term: MqttClient;
  let user: string;
  let tt: ScriptedTerminal;
  const P = 'locker/v1/t/term-a1';
  const lastCodes = () => tt.lastCodes();
  const create = async () => (await ok(t.post('/v1/Logistics/CreateLocalShipment', { ToUserUid: user, ...booking() }))).shipmentUid as string;
  const cancel = async (uid: string) => ok(t.post('/v1/Logistics/CancelShipment', { shipmentUid: uid }));

  beforeAll(async () => {
    // the marker poll and the reconcile are far away: only the in-process notification pushes
    t = await createTestService(engine, { config: { mqtt: { mode: 'embedded', host: '127.0.0.1', port: 0 }, edge: { pollMs: 600_000, reconcileSeconds: 3600 } }, startWorkers: true });
    user = await addUser(t, PUP_A1);
    tt = await connectScriptedTerminal(t);
    term = tt.term;
  });
  afterAll(async () => {
    tt?.close();
    await t?.close();
  });

  it('a creation and then cancels at an unchanged clock are pushed at once, each as its own delta', async () => {
    const a = await create();
    await term.publishAsync(`${P}/up/status`, JSON.stringify(terminalStatus(0, null)), { qos: 1, retain: true });
    const snap = await waitFor(() => lastCodes()?.type === 'snapshot' && lastCodes(), 'snapshot');
    expect(snap.codes.filter((c: any) => c.shipmentUid === a)).toHaveLength(4);

    const b = await create();
    const d1 = await waitFor(() => lastCodes()?.version === snap.version + 1 && lastCodes(), 'delta for the creation');
    expect(d1.upserts.filter((c: any) => c.shipmentUid === b)).toHaveLength(4);

    await cancel(a);
    const d2 = await waitFor(() => lastCodes()?.version === snap.version + 2 && lastCodes(), 'delta for the first cancel');
    expect(d2.revoke.sort()).toEqual(snap.codes.filter((c: any) => c.shipmentUid === a).map((c: any) => c.id).sort());

    await cancel(b); // same timestamp as the first cancel
    const d3 = await waitFor(() => lastCodes()?.version === snap.version + 3 && lastCodes(), 'delta for the second cancel');
    expect(d3.revoke.sort()).toEqual(d1.upserts.map((c: any) => c.id).sort());
  });

  it('the change marker changes on an invalidation at the same timestamp as an earlier one', async () => {
    const es = new EdgeSync(t.ctx, { publish: async () => {}, subscribe: async () => {} } as never);
    const marker = async () => ((await (es as any).readMarkers()) as Map<string, string>).get(PUP_A1);
    const a = await create();
    const b = await create();
    await cancel(a);
    const m1 = await marker();
    await cancel(b); // the clock did not move: max(invalidated_at) and the row count are unchanged
    const m2 = await marker();
    expect(m2).not.toEqual(m1);
  });
});
