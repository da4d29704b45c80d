// A small typed client of the tenant API, built on openapi-fetch over the types generated from the
// service's OpenAPI document (generated/api.ts). It
//   - gets an access token with the client credentials (POST /connect/token) and renews it before
//     it expires, and once more when a call is answered 401 (then repeats the call once);
//   - sends an Idempotency-Key on the calls that honour one (the Create* calls and CancelShipment,
//     docs/callbacks.md): a fresh UUID per logical call unless the caller passes its own, and the
//     same key on every retry of that call (after a 401, a lost connection, a 502/503/504 or
//     IdempotencyKeyInProgress), so a retry never books twice;
//   - turns the envelope's errors into LockerApiError carrying the error code (errors.ts).
import createClient, { type Client } from 'openapi-fetch';
import type { paths } from './generated/api';
import { errorFromResponse, LockerApiError } from './errors';

export type { paths } from './generated/api';

type PostOf<P extends keyof paths> = paths[P] extends { post: infer O } ? O : never;
type JsonBodyOf<O> = O extends { requestBody: { content: { 'application/json': infer B } } } ? B : never;

/** The /v1/ calls that take a JSON body (all but UploadAccountSuggestions, which is multipart: use `raw`). */
export type ApiPath = { [P in keyof paths]: P extends `/v1/${string}` ? ([JsonBodyOf<PostOf<P>>] extends [never] ? never : P) : never }[keyof paths];
/** The request body of a call. */
export type RequestOf<P extends ApiPath> = JsonBodyOf<PostOf<P>>;
/** The success answer of a call (envelope fields included). */
export type ResponseOf<P extends ApiPath> = PostOf<P> extends { responses: { 200: { content: { 'application/json': infer R } } } } ? R : never;

/**
 * The calls that honour an Idempotency-Key: every /v1/Logistics/Create* call (shipments and the
 * flows), CreateAccount and CancelShipment (routes declared `idempotent: true` in packages/central;
 * packages/client/test/generated-types.test.ts checks this rule against the service's routes).
 */
export type IdempotentPath = Extract<ApiPath, `/v1/Logistics/Create${string}` | '/v1/Account/CreateAccount' | '/v1/Logistics/CancelShipment'>;

/** Whether a path (or a URL's path, e.g. behind a prefix) is one of the IdempotentPath calls. */
export function isIdempotentPath(path: string): boolean {
  return /\/v1\/Logistics\/Create[A-Za-z]*$/.test(path) || /\/v1\/Account\/CreateAccount$/.test(path) || /\/v1\/Logistics\/CancelShipment$/.test(path);
}

export interface LockerClientOptions {
  /** where the service is, e.g. `https://lockers.example` or `http://127.0.0.1:8080` (without /v1) */
  baseUrl: string;
  clientId: string;
  clientSecret: string;
  /** default `integration_api` */
  scope?: string;
  /**
   * Renew the token this many seconds before it expires (default: 60, at most half its lifetime),
   * so a call does not leave with a token that expires on the way.
   */
  renewBeforeSeconds?: number;
  /**
   * Retries of a call that carries an Idempotency-Key after a lost connection, a 502/503/504 or
   * IdempotencyKeyInProgress (default 2). Calls without a key are not retried (except once after a
   * 401 with a new token: a 401 means the call did not run).
   */
  maxRetries?: number;
  /** the fetch to use (default: the global fetch) */
  fetch?: (input: Request) => Promise<Response>;
  /** the clock for token expiry, in ms (default Date.now) */
  now?: () => number;
  /** makes idempotency keys (default crypto.randomUUID) */
  newIdempotencyKey?: () => string;
  /** waits between retries (default setTimeout); tests pass a fake */
  sleep?: (ms: number) => Promise<void>;
}

export interface CallOptions {
  /** your own Idempotency-Key for this call (idempotent calls only): send the same key to repeat a call you lost the answer of */
  idempotencyKey?: string;
  /** sent as X-Request-Id (1 to 64 characters of A-Z a-z 0-9 . _ -): the service logs it */
  requestId?: string;
  signal?: AbortSignal;
}

interface CachedToken {
  token: string;
  /** ms on the client's clock when it should be renewed */
  renewAt: number;
}

const defaultSleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export class LockerClient {
  /**
   * The openapi-fetch client, for calls `call` does not cover (UploadAccountSuggestions) or when you
   * want `{ data, error, response }` instead of exceptions. Tokens, Idempotency-Key and retries
   * apply to it as well.
   */
  readonly raw: Client<paths>;
  private readonly baseUrl: string;
  private readonly fetchImpl: (input: Request) => Promise<Response>;
  private readonly now: () => number;
  private readonly newKey: () => string;
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly maxRetries: number;
  private cached: CachedToken | null = null;
  private pending: Promise<CachedToken> | null = null;
  /** how many tokens this client obtained (for tests and metrics) */
  tokensIssued = 0;

  constructor(private readonly opts: LockerClientOptions) {
    this.baseUrl = opts.baseUrl.replace(/\/+$/, '');
    this.fetchImpl = opts.fetch ?? ((r) => globalThis.fetch(r));
    this.now = opts.now ?? Date.now;
    this.newKey = opts.newIdempotencyKey ?? (() => globalThis.crypto.randomUUID());
    this.sleep = opts.sleep ?? defaultSleep;
    this.maxRetries = opts.maxRetries ?? 2;
    this.raw = createClient<paths>({ baseUrl: this.baseUrl, fetch: (req) => this.send(req) });
  }

  /**
   * Calls a /v1/ endpoint and returns its answer; throws LockerApiError (with the envelope's code)
   * when the service says `success: false`.
   */
  async call<P extends ApiPath>(path: P, body: RequestOf<P>, options: CallOptions = {}): Promise<ResponseOf<P>> {
    const headers: Record<string, string> = {};
    if (options.idempotencyKey !== undefined) headers['idempotency-key'] = options.idempotencyKey;
    if (options.requestId !== undefined) headers['x-request-id'] = options.requestId;
    // the generic path defeats openapi-fetch's overloads; the types are checked at `call`'s signature
    const post = this.raw.POST as (p: string, init: { body: unknown; headers: Record<string, string>; signal?: AbortSignal }) => Promise<{ data?: unknown; error?: unknown; response: Response }>;
    const { data, error, response } = await post(path, { body, headers, signal: options.signal });
    const answer = (data ?? error) as { success?: unknown } | undefined;
    if (response.ok && answer && typeof answer === 'object' && answer.success === true) return answer as ResponseOf<P>;
    throw errorFromResponse(response, answer ?? null);
  }

  /** A valid access token: the cached one, or a new one when it is near its expiry. */
  async token(): Promise<string> {
    if (this.cached && this.now() < this.cached.renewAt) return this.cached.token;
    // one token request at a time: concurrent calls share it
    this.pending ??= this.fetchToken().finally(() => (this.pending = null));
    this.cached = await this.pending;
    return this.cached.token;
  }

  /** Forgets the token (the next call gets a new one). */
  clearToken(): void {
    this.cached = null;
  }

  private async fetchToken(): Promise<CachedToken> {
    const form = new URLSearchParams({ grant_type: 'client_credentials', client_id: this.opts.clientId, client_secret: this.opts.clientSecret, scope: this.opts.scope ?? 'integration_api' });
    const started = this.now();
    const res = await this.fetchImpl(
      new Request(`${this.baseUrl}/connect/token`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' }, body: form.toString() }),
    );
    const text = await res.text();
    let body: any = text;
    try {
      body = JSON.parse(text);
    } catch {
      /* not JSON: reported as UnexpectedResponse */
    }
    if (!res.ok || typeof body?.access_token !== 'string') throw errorFromResponse(res, body);
    const lifetime = Number(body.expires_in) > 0 ? Number(body.expires_in) : 60;
    const before = Math.min(this.opts.renewBeforeSeconds ?? 60, lifetime / 2);
    this.tokensIssued++;
    // counted from when the request left: the service's clock started the lifetime no earlier
    return { token: body.access_token, renewAt: started + (lifetime - before) * 1000 };
  }

  /** The fetch that openapi-fetch uses: token, Idempotency-Key, retries. */
  private async send(req: Request): Promise<Response> {
    const headers = new Headers(req.headers);
    const path = new URL(req.url).pathname;
    if (!headers.has('idempotency-key') && isIdempotentPath(path)) headers.set('idempotency-key', this.newKey());
    const retryable = headers.has('idempotency-key');
    // the body is read once and sent again as it is on every attempt
    const body = req.body ? await req.arrayBuffer() : undefined;
    let renewed = false;
    for (let attempt = 0; ; ) {
      const token = await this.token();
      headers.set('authorization', `Bearer ${token}`);
      let res: Response;
      try {
        res = await this.fetchImpl(new Request(req.url, { method: req.method, headers, body, signal: req.signal }));
      } catch (err) {
        if (!retryable || attempt >= this.maxRetries || req.signal.aborted) throw err;
        attempt++;
        await this.sleep(250 * 2 ** (attempt - 1));
        continue;
      }
      if (res.status === 401 && !renewed) {
        // the token was refused (expired, revoked key, clock skew): one new token, one more try
        renewed = true;
        if (this.cached?.token === token) this.cached = null;
        await res.body?.cancel();
        continue;
      }
      if (retryable && attempt < this.maxRetries && (await this.isTransient(res))) {
        attempt++;
        const ra = Number(res.headers.get('retry-after'));
        await res.body?.cancel();
        await this.sleep(Number.isFinite(ra) && ra > 0 ? Math.min(ra, 30) * 1000 : 250 * 2 ** (attempt - 1));
        continue;
      }
      return res;
    }
  }

  private async isTransient(res: Response): Promise<boolean> {
    if (res.status === 502 || res.status === 503 || res.status === 504) return true;
    if (res.status !== 400 || !res.headers.has('retry-after')) return false;
    try {
      const b = (await res.clone().json()) as { error?: unknown };
      return b?.error === 'IdempotencyKeyInProgress';
    } catch {
      return false;
    }
  }
}

/** `new LockerClient(options)`. */
export function createLockerClient(options: LockerClientOptions): LockerClient {
  return new LockerClient(options);
}

export { LockerApiError };
