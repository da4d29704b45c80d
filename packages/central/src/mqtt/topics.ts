// MQTT topics between the central service and terminals. Each terminal lives under its own
// prefix; "up" is terminal -> central (door events, status, acks), "down" is central -> terminal
// (unlock commands, access-code updates). A terminal may publish only to its own up/ topics and
// subscribe only to its own down/ topics.
export const TOPIC_ROOT = 'locker/v1/t';

export const topics = {
  prefix: (terminalId: string) => `${TOPIC_ROOT}/${terminalId}/`,
  up: (terminalId: string, kind: 'events' | 'status' | 'acks' | string) => `${TOPIC_ROOT}/${terminalId}/up/${kind}`,
  down: (terminalId: string, kind: 'commands' | 'codes' | string) => `${TOPIC_ROOT}/${terminalId}/down/${kind}`,
  /** central subscribes to every terminal's up/ topics */
  allUp: `${TOPIC_ROOT}/+/up/#`,
};

/** Parses `locker/v1/t/<id>/<dir>/<kind>`; null for anything else. */
export function parseTopic(topic: string): { terminalId: string; dir: 'up' | 'down'; kind: string } | null {
  const parts = topic.split('/');
  if (parts.length < 6 || `${parts[0]}/${parts[1]}/${parts[2]}` !== TOPIC_ROOT) return null;
  const dir = parts[4];
  if (dir !== 'up' && dir !== 'down') return null;
  return { terminalId: parts[3]!, dir, kind: parts.slice(5).join('/') };
}

const hasWildcard = (s: string) => s.includes('+') || s.includes('#');

/** May terminal `id` publish to `topic`? Only to its own up/ topics, never with wildcards. */
export function mayPublish(id: string, topic: string): boolean {
  if (hasWildcard(topic)) return false;
  const p = parseTopic(topic);
  return !!p && p.terminalId === id && p.dir === 'up' && p.kind.length > 0;
}

/** May terminal `id` subscribe to `filter`? Only within its own down/ subtree. */
export function maySubscribe(id: string, filter: string): boolean {
  const prefix = `${TOPIC_ROOT}/${id}/down/`;
  if (filter === `${TOPIC_ROOT}/${id}/down/#`) return true;
  if (!filter.startsWith(prefix)) return false;
  // wildcards allowed only below the terminal's own down/ level
  return !hasWildcard(filter.slice(0, prefix.length));
}
