// The headers that authenticate a callback (product.md). Pure functions: the delivery worker and
// docs/callbacks.md use them; tenants implement the same computation on their side.
//   HMAC:   X-Hmac-Sha256 = hex HMAC-SHA256(authKey, shipmentUid)
//           X-Signature   = t=<unix seconds>,v1=<hex HMAC-SHA256(authKey, t + "." + raw body)>
//   ApiKey: X-Api-Key     = authKey, and the same X-Signature (product.md: every callback carries
//           it; an ApiKey receiver may verify the body and the time with the key it already has)
//   None:   nothing (there is no key)
import crypto from 'node:crypto';
import type { AuthType } from './registration';

export function hmacHex(key: string, data: string): string {
  return crypto.createHmac('sha256', Buffer.from(key, 'utf8')).update(data, 'utf8').digest('hex');
}

export interface SignInput {
  authType: AuthType;
  authKey: string | null;
  shipmentUid: string;
  /** the exact body bytes sent (UTF-8 JSON) */
  body: string;
  /** the signing time, unix seconds */
  timestamp: number;
}

export function authHeaders(inp: SignInput): Record<string, string> {
  if (inp.authType === 'None' || !inp.authKey) return {};
  const t = String(inp.timestamp);
  const signature = `t=${t},v1=${hmacHex(inp.authKey, `${t}.${inp.body}`)}`;
  if (inp.authType === 'ApiKey') return { 'x-api-key': inp.authKey, 'x-signature': signature };
  return { 'x-hmac-sha256': hmacHex(inp.authKey, inp.shipmentUid), 'x-signature': signature };
}
