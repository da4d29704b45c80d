// The in-process code-change hook (docs/edge-protocol.md, "Code pushes"): the shipment service
// calls notifyCodesChanged(pupUid) after a commit that changed codes of a pick up point, and every
// EdgeSync running in this process pushes the change to that point's online terminals at once.
// Other instances notice it by their marker poll. Kept apart from sync.ts so the shipment service
// does not import the edge sync (which imports the shipment service).

export interface CodesChangedListener {
  pupChanged(pupUid: string): void;
}

const listeners = new Set<CodesChangedListener>();

export function onCodesChanged(l: CodesChangedListener): () => void {
  listeners.add(l);
  return () => listeners.delete(l);
}

/**
 * Shipment code calls this after it changed codes of a pick up point: the terminals get the
 * change at once instead of at the next marker poll. Safe to call when no sync runs.
 */
export function notifyCodesChanged(pupUid: string): void {
  for (const l of listeners) l.pupChanged(pupUid);
}
