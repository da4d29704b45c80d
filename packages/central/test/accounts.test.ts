import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { DISPATCHER_A_EMAIL, PUP_A1, PUP_A2, PUP_B1, UNKNOWN_UID } from './support/fixtures';
import { MAIL_CODE_RE, splitMailCode, generateMailCode } from '../src/accounts/mail-code';
import { isValidEmail, parsePhone, parseLanguage } from '../src/accounts/validate';
import { mergeFlags, DEFAULT_FLAGS, normalizeDetails } from '../src/accounts/service';
import { up as migration102 } from '../src/db/migrations/102_account_mail_codes';

let seq = 0;
const uniq = () => `${Date.now().toString(36)}${(seq++).toString(36)}`;

describe('account field rules (pure)', () => {
  it('validates e-mail addresses', () => {
    for (const ok of ['a@b.nl', 'first.last+tag@sub.example.com', 'X_Y@ex-ample.org']) expect(isValidEmail(ok), ok).toBe(true);
    for (const bad of ['', 'plain', '@x.nl', 'a@', 'a@b', 'a b@c.nl', 'a@b..nl', '.a@b.nl', 'a..b@c.nl', 'a@-b.nl', `${'x'.repeat(65)}@b.nl`]) expect(isValidEmail(bad), bad).toBe(false);
  });
  it('accepts phone numbers with + or 00 only and normalises them to +digits', () => {
    expect(parsePhone('+31 6 1234 5678')).toBe('+31612345678');
    expect(parsePhone('0031612345678')).toBe('+31612345678');
    expect(parsePhone('(+32) 470-12.34.56')).toBe('+32470123456');
    for (const bad of ['0612345678', '31612345678', '+31', '+0123456789', '+31abc12345', '']) expect(parsePhone(bad), bad).toBeNull();
  });
  it('normalises language codes', () => {
    expect(parseLanguage('NL')).toBe('nl');
    expect(parseLanguage('en_gb')).toBe('en-GB');
    expect(parseLanguage('english')).toBeNull();
  });
  it('makes mail codes of three letters and five digits and splits them at the hyphen', () => {
    for (let i = 0; i < 200; i++) expect(generateMailCode()).toMatch(MAIL_CODE_RE);
    expect(generateMailCode(() => 0)).toBe('AAA-00000');
    expect(splitMailCode('KTR-40719')).toEqual({ mailCodeFirstName: 'KTR', mailCodeLastName: '40719' });
    expect(splitMailCode(null)).toEqual({ mailCodeFirstName: null, mailCodeLastName: null });
  });
  it('merges mutation flags (null keeps); first and last name flags are independent', () => {
    expect(mergeFlags(DEFAULT_FLAGS, { canChangePhoneNumber: false, canChangeAddress: null })).toEqual({ ...DEFAULT_FLAGS, canChangePhoneNumber: false });
    expect(mergeFlags(DEFAULT_FLAGS, { canChangeFirstName: false })).toEqual({ ...DEFAULT_FLAGS, canChangeFirstName: false, canChangeLastName: true });
    expect(mergeFlags(DEFAULT_FLAGS, { canChangeFirstName: false, canChangeLastName: false })).toMatchObject({ canChangeFirstName: false, canChangeLastName: false });
  });
  it('enforces the name and address groups', () => {
    expect(() => normalizeDetails({ firstName: 'A' })).toThrow(/lastName: firstName and lastName must be set together/);
    expect(() => normalizeDetails({ city: 'X' })).toThrow(/streetName, streetNo, mailbox, countryCode/);
    expect(normalizeDetails({ streetName: 'Dam', streetNo: '', mailbox: '', city: 'Amsterdam', countryCode: 'nl' }).address).toEqual({ streetName: 'Dam', streetNo: '', mailbox: '', city: 'Amsterdam', countryCode: 'NL' });
    expect(() => normalizeDetails({ streetName: 'Dam', streetNo: '1', mailbox: '', city: 'Amsterdam', countryCode: 'XX' })).toThrow(/countryCode/);
    // the create calls take each address field on its own
    expect(normalizeDetails({ city: ' Utrecht ', countryCode: 'nl' }, { wholeAddress: false }).address).toEqual({ city: 'Utrecht', countryCode: 'NL' });
    expect(() => normalizeDetails({ countryCode: 'XX' }, { wholeAddress: false })).toThrow(/countryCode/);
  });
});

describeEngines('accounts API', (engine) => {
  let t: TestService;
  let tokB: string;
  beforeAll(async () => {
    t = await createTestService(engine);
    tokB = await t.token('tenant-b');
  });
  afterAll(async () => t?.close());

  const newAccount = (over: Record<string, unknown> = {}) => ({
    emailAddress: `user-${uniq()}@example.test`,
    firstName: 'Jan',
    lastName: 'Jansen',
    pickUpPointUid: PUP_A1,
    ...over,
  });
  const create = async (over: Record<string, unknown> = {}, token?: string) => {
    const res = await t.post('/v1/Account/CreateAccount', newAccount(over), token);
    expect(res.body.success, JSON.stringify(res.body)).toBe(true);
    return res.body as Record<string, any>;
  };
  const links = async (uid: string) =>
    (await t.ctx.db.kysely.selectFrom('account_pups').select('pup_uid').where('account_uid', '=', uid).execute()).map((r) => r.pup_uid).sort();

  describe('CreateAccount', () => {
    it('creates an account linked to the PUP with a mail code; userName defaults to the e-mail address', async () => {
      const body = newAccount({ phoneNumber: '0031 6 12345678', languageCode: 'nl-nl', streetName: 'Damrak', streetNo: '1', mailbox: 'B', city: 'Amsterdam', countryCode: 'nl' });
      const res = await t.post('/v1/Account/CreateAccount', body);
      expect(res.status).toBe(200);
      expect(res.body).toEqual({
        success: true, error: null, message: null,
        userUid: expect.stringMatching(/^[0-9a-f]{32}$/), userName: body.emailAddress, canManageUser: true, firstName: 'Jan', lastName: 'Jansen',
        emailAddress: body.emailAddress, phoneNumber: '+31612345678', mainPupUid: PUP_A1, mainPupName: 'Alpha Station', languageCode: 'nl-NL',
        mailCode: expect.stringMatching(MAIL_CODE_RE),
      });
      expect(await links(res.body.userUid)).toEqual([PUP_A1]);
      const got = await t.post('/v1/Account/GetAccount', { userUid: res.body.userUid });
      expect(got.body).toMatchObject({ street: 'Damrak 1', mailbox: 'B', city: 'Amsterdam', countryCode: 'NL' });
    });

    it('accepts a partial address (each address field is optional on create)', async () => {
      const cases: [Record<string, unknown>, Record<string, unknown>][] = [
        [{ city: 'Utrecht', countryCode: 'nl' }, { street: null, mailbox: null, city: 'Utrecht', countryCode: 'NL' }],
        [{ streetName: 'Damrak' }, { street: 'Damrak', mailbox: null, city: null, countryCode: null }],
        [{ streetNo: '12a', mailbox: 'B' }, { street: '12a', mailbox: 'B', city: null, countryCode: null }],
      ];
      for (const [addr, want] of cases) {
        const a = await create(addr);
        const got = await t.post('/v1/Account/GetAccount', { userUid: a.userUid });
        expect(got.body, JSON.stringify(addr)).toMatchObject(want);
      }
      const og = await t.post('/v1/Account/CreateOrGetAccount', newAccount({ city: 'Delft' }));
      expect(og.body).toMatchObject({ success: true, isExisting: false });
      expect((await t.post('/v1/Account/GetAccount', { userUid: og.body.userUid })).body).toMatchObject({ city: 'Delft', countryCode: null });
      const bad = await t.post('/v1/Account/CreateAccount', newAccount({ countryCode: 'XX' }));
      expect(bad.body).toMatchObject({ success: false, error: 'InvalidRequest', message: expect.stringContaining('countryCode') });
    });

    it('uses a given userName', async () => {
      const a = await create({ userName: `login-${uniq()}` });
      expect(a.userName).toMatch(/^login-/);
    });

    it('answers EmailAlreadyRegistered for a registered e-mail address (case-insensitive) and for an existing username', async () => {
      const a = await create();
      const dupEmail = await t.post('/v1/Account/CreateAccount', newAccount({ emailAddress: a.emailAddress.toUpperCase() }));
      expect(dupEmail.status).toBe(400);
      expect(dupEmail.body).toMatchObject({ success: false, error: 'EmailAlreadyRegistered' });
      const dupUser = await t.post('/v1/Account/CreateAccount', newAccount({ userName: a.userName }));
      expect(dupUser.body).toMatchObject({ success: false, error: 'EmailAlreadyRegistered', message: expect.stringContaining('userName') });
    });

    it('answers AccessDenied with the userUid when the e-mail belongs to an account of another tenant', async () => {
      const b = await create({ pickUpPointUid: PUP_B1 }, tokB);
      const res = await t.post('/v1/Account/CreateAccount', newAccount({ emailAddress: b.emailAddress }));
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ success: false, error: 'AccessDenied', userUid: b.userUid, canManageUser: false, emailAddress: null, firstName: null });
    });

    it.each([
      ['missing', undefined],
      ['null', null],
      ['malformed', 'not a uid!'],
      ['unknown', UNKNOWN_UID],
      ["another tenant's", PUP_B1],
    ])('answers InvalidPupUid for a %s pickUpPointUid', async (_n, pup) => {
      const body: Record<string, unknown> = newAccount({ pickUpPointUid: pup });
      if (pup === undefined) delete body.pickUpPointUid;
      const res = await t.post('/v1/Account/CreateAccount', body);
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ success: false, error: 'InvalidPupUid' });
    });

    it('applies the mutation configuration', async () => {
      const a = await create({ mutationConfig: { canChangeEmailAddress: false, canRemoveManually: false, canChangePhoneNumber: null } });
      const cfg = await t.post('/v1/Account/GetAccountMutationConfig', { userUid: a.userUid });
      expect(cfg.body).toMatchObject({ success: true, canChangeEmailAddress: false, canRemoveManually: false, canChangePhoneNumber: true, canRemoveAutomatically: false });
    });

    it('applies canChangeFirstName and canChangeLastName independently', async () => {
      const body = newAccount({ mutationConfig: { canChangeFirstName: false, canChangeLastName: true } });
      const res = await t.post('/v1/Account/CreateAccount', body);
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ success: true, userUid: expect.any(String), canManageUser: true, emailAddress: body.emailAddress });
      const cfg = await t.post('/v1/Account/GetAccountMutationConfig', { userUid: res.body.userUid });
      expect(cfg.body).toEqual({ success: true, error: null, message: null, userUid: res.body.userUid, ...DEFAULT_FLAGS, canChangeFirstName: false, canChangeLastName: true });
    });

    it.each([
      [{ emailAddress: 'not-an-email' }, 'emailAddress'],
      [{ phoneNumber: '0612345678' }, 'phoneNumber'],
      [{ languageCode: 'dutch' }, 'languageCode'],
      [{ firstName: '  ' }, 'firstName'],
      [{ streetName: '  ' }, 'streetName'],
      [{ streetName: 'Damrak', streetNo: '1', mailbox: '', city: 'Amsterdam', countryCode: 'Netherlands' }, 'countryCode'],
    ])('refuses %o with InvalidRequest naming %s', async (over, field) => {
      const res = await t.post('/v1/Account/CreateAccount', newAccount(over));
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ success: false, error: 'InvalidRequest', message: expect.stringContaining(field) });
    });

    it('replays an Idempotency-Key retry instead of answering EmailAlreadyRegistered', async () => {
      const body = newAccount();
      const send = async () =>
        t.app.inject({
          method: 'POST', url: '/v1/Account/CreateAccount', payload: JSON.stringify(body),
          headers: { 'content-type': 'application/json', authorization: `Bearer ${await t.token()}`, 'idempotency-key': `acct-${uniq()}-${body.emailAddress}`.slice(0, 60) },
        });
      const key = `acct-key-${uniq()}`;
      const withKey = async () =>
        t.app.inject({ method: 'POST', url: '/v1/Account/CreateAccount', payload: JSON.stringify(body), headers: { 'content-type': 'application/json', authorization: `Bearer ${await t.token()}`, 'idempotency-key': key } });
      const first = await withKey();
      const again = await withKey();
      expect(first.json().success).toBe(true);
      expect(again.json()).toEqual(first.json());
      expect(again.headers['idempotent-replayed']).toBe('true');
      const otherKey = await send();
      expect(otherKey.json()).toMatchObject({ success: false, error: 'EmailAlreadyRegistered' });
    });

    it('refuses a body without required fields with InvalidRequest', async () => {
      const res = await t.post('/v1/Account/CreateAccount', { firstName: 'X' });
      expect(res.body).toMatchObject({ success: false, error: 'InvalidRequest' });
    });
  });

  describe('CreateOrGetAccount', () => {
    it('creates (isExisting false), then returns the same account (isExisting true)', async () => {
      const body = newAccount();
      const first = await t.post('/v1/Account/CreateOrGetAccount', body);
      expect(first.body).toMatchObject({ success: true, isExisting: false, canManageUser: true, userName: body.emailAddress, mailCode: expect.stringMatching(MAIL_CODE_RE) });
      const again = await t.post('/v1/Account/CreateOrGetAccount', { ...body, emailAddress: body.emailAddress.toUpperCase(), firstName: 'Other', lastName: 'Name' });
      expect(again.body).toMatchObject({ success: true, isExisting: true, userUid: first.body.userUid, firstName: 'Jan' });
    });

    it('concurrent calls for one new e-mail address create one account; every call succeeds with it', async () => {
      const body = newAccount();
      const res = await Promise.all(Array.from({ length: 8 }, () => t.post('/v1/Account/CreateOrGetAccount', body)));
      for (const r of res) expect(r.body, JSON.stringify(r.body)).toMatchObject({ success: true });
      expect(new Set(res.map((r) => r.body.userUid)).size).toBe(1);
      expect(res.filter((r) => r.body.isExisting === false)).toHaveLength(1);
    });

    it('concurrent CreateAccount calls for one e-mail address: one account, every other call EmailAlreadyRegistered', async () => {
      const body = newAccount();
      const res = await Promise.all(Array.from({ length: 8 }, () => t.post('/v1/Account/CreateAccount', body)));
      for (const r of res) expect(r.status).toBeLessThan(500);
      expect(res.filter((r) => r.body.success === true)).toHaveLength(1);
      for (const r of res.filter((x) => x.body.success !== true)) expect(r.body.error).toBe('EmailAlreadyRegistered');
    });

    it('updates the e-mail address of the account found by username', async () => {
      const userName = `login-${uniq()}`;
      const a = await create({ userName });
      const newEmail = `moved-${uniq()}@example.test`;
      const res = await t.post('/v1/Account/CreateOrGetAccount', newAccount({ userName, emailAddress: newEmail }));
      expect(res.body).toMatchObject({ success: true, isExisting: true, userUid: a.userUid, emailAddress: newEmail, userName });
    });

    it('answers EmailAlreadyRegistered when the username account may not change its e-mail address', async () => {
      const userName = `locked-${uniq()}`;
      const a = await create({ userName, mutationConfig: { canChangeEmailAddress: false } });
      const res = await t.post('/v1/Account/CreateOrGetAccount', newAccount({ userName, emailAddress: `x-${uniq()}@example.test` }));
      expect(res.body).toMatchObject({ success: false, error: 'EmailAlreadyRegistered' });
      const got = await t.post('/v1/Account/GetAccount', { userUid: a.userUid });
      expect(got.body.emailAddress).toBe(a.emailAddress);
    });

    it('answers EmailAlreadyRegistered when the e-mail belongs to another account than the username', async () => {
      const userName = `user-${uniq()}`;
      await create({ userName });
      const other = await create();
      const res = await t.post('/v1/Account/CreateOrGetAccount', newAccount({ userName, emailAddress: other.emailAddress }));
      expect(res.body).toMatchObject({ success: false, error: 'EmailAlreadyRegistered' });
      const mismatch = await t.post('/v1/Account/CreateOrGetAccount', newAccount({ userName: `free-${uniq()}`, emailAddress: other.emailAddress }));
      expect(mismatch.body).toMatchObject({ success: false, error: 'EmailAlreadyRegistered' });
    });

    it("answers AccessDenied with the existing userUid for another tenant's account", async () => {
      const b = await create({ pickUpPointUid: PUP_B1 }, tokB);
      const res = await t.post('/v1/Account/CreateOrGetAccount', newAccount({ emailAddress: b.emailAddress }));
      expect(res.status).toBe(400);
      expect(res.body).toEqual({
        success: false, error: 'AccessDenied', message: expect.any(String), userUid: b.userUid, isExisting: true, canManageUser: false,
        userName: null, firstName: null, lastName: null, emailAddress: null, phoneNumber: null, mainPupUid: null, mainPupName: null, languageCode: null, mailCode: null,
      });
      const byUser = await t.post('/v1/Account/CreateOrGetAccount', newAccount({ userName: b.userName, emailAddress: `z-${uniq()}@example.test` }));
      expect(byUser.body).toMatchObject({ error: 'AccessDenied', userUid: b.userUid });
    });

    it('answers InvalidPupUid; applies a last name flag without the first name flag', async () => {
      const bad = await t.post('/v1/Account/CreateOrGetAccount', newAccount({ pickUpPointUid: PUP_B1 }));
      expect(bad.body).toMatchObject({ success: false, error: 'InvalidPupUid' });
      const cfg = await t.post('/v1/Account/CreateOrGetAccount', newAccount({ mutationConfig: { canChangeLastName: false } }));
      expect(cfg.body).toMatchObject({ success: true, isExisting: false, userUid: expect.any(String) });
      const flags = await t.post('/v1/Account/GetAccountMutationConfig', { userUid: cfg.body.userUid });
      expect(flags.body).toMatchObject({ canChangeFirstName: true, canChangeLastName: false });
    });
  });

  describe('GetAccount', () => {
    it('finds by userUid, userName and e-mail address; userUid wins over the others', async () => {
      const a = await create({ userName: `find-${uniq()}` });
      const b = await create();
      for (const q of [{ userUid: a.userUid }, { userName: a.userName.toUpperCase() }, { emailAddress: a.emailAddress.toUpperCase() }]) {
        const res = await t.post('/v1/Account/GetAccount', q);
        expect(res.body, JSON.stringify(q)).toMatchObject({ success: true, isExisting: true, canManageUser: true, userUid: a.userUid, emailAddress: a.emailAddress, mainPupName: 'Alpha Station' });
      }
      const order = await t.post('/v1/Account/GetAccount', { userUid: a.userUid, userName: b.userName, emailAddress: b.emailAddress });
      expect(order.body.userUid).toBe(a.userUid);
      const fallback = await t.post('/v1/Account/GetAccount', { userUid: UNKNOWN_UID, emailAddress: b.emailAddress });
      expect(fallback.body.userUid).toBe(b.userUid);
    });

    it('answers isExisting false and userUid null when nothing is given or found', async () => {
      for (const q of [{}, { userUid: null, userName: null, emailAddress: null }, { emailAddress: 'nobody@example.test' }]) {
        const res = await t.post('/v1/Account/GetAccount', q);
        expect(res.body).toMatchObject({ success: true, isExisting: false, canManageUser: false, userUid: null, emailAddress: null });
      }
    });

    it("reveals only existence and userUid of another tenant's account", async () => {
      const a = await create();
      const res = await t.post('/v1/Account/GetAccount', { emailAddress: a.emailAddress }, tokB);
      expect(res.body).toEqual({
        success: true, error: null, message: null, isExisting: true, canManageUser: false, userUid: a.userUid,
        userName: null, firstName: null, lastName: null, emailAddress: null, phoneNumber: null, mainPupUid: null, mainPupName: null,
        mailCode: null, languageCode: null, street: null, mailbox: null, city: null, countryCode: null,
      });
    });

    it("answers not found for another tenant's account looked up by userUid or userName; only the e-mail address reveals it", async () => {
      const a = await create({ userName: `hidden-${uniq()}` });
      const notFound = { success: true, isExisting: false, canManageUser: false, userUid: null, userName: null, emailAddress: null };
      for (const q of [{ userUid: a.userUid }, { userName: a.userName }, { userUid: a.userUid, userName: a.userName }]) {
        expect((await t.post('/v1/Account/GetAccount', q, tokB)).body, JSON.stringify(q)).toMatchObject(notFound);
      }
      // the search goes on past a criterion that found only an unmanageable account
      const own = await create({ pickUpPointUid: PUP_B1 }, tokB);
      const next = await t.post('/v1/Account/GetAccount', { userUid: a.userUid, userName: a.userName, emailAddress: own.emailAddress }, tokB);
      expect(next.body).toMatchObject({ isExisting: true, canManageUser: true, userUid: own.userUid, emailAddress: own.emailAddress });
      const byEmail = await t.post('/v1/Account/GetAccount', { userUid: a.userUid, emailAddress: a.emailAddress }, tokB);
      expect(byEmail.body).toMatchObject({ isExisting: true, canManageUser: false, userUid: a.userUid, userName: null, emailAddress: null });
      // a manageable account found by userUid still wins over the later criteria
      const first = await t.post('/v1/Account/GetAccount', { userUid: own.userUid, emailAddress: a.emailAddress }, tokB);
      expect(first.body).toMatchObject({ canManageUser: true, userUid: own.userUid });
    });
  });

  describe('GetAccounts', () => {
    let tag: string;
    let accts: Record<string, any>[];
    beforeAll(async () => {
      tag = `grp${uniq()}`;
      accts = [];
      for (let i = 0; i < 5; i++) {
        accts.push(
          await create({
            emailAddress: `${tag}-${i}@example.test`,
            firstName: i % 2 ? 'Piet' : 'Klaas',
            lastName: `Vaart${i}`,
            phoneNumber: `+3161000000${i}`,
            pickUpPointUid: i < 3 ? PUP_A1 : PUP_A2,
            languageCode: 'en',
            streetName: 'Kade', streetNo: String(i), mailbox: '', city: 'Utrecht', countryCode: 'NL',
          }),
        );
      }
      await create({ emailAddress: `${tag}-b@example.test`, pickUpPointUid: PUP_B1 }, tokB);
    });

    it('lists only manageable accounts with the default fields, paged', async () => {
      const res = await t.post('/v1/Account/GetAccounts', { pageNo: 1, pageSize: 2, emailAddress: tag });
      expect(res.body).toMatchObject({ success: true, pageNo: 1, pageSize: 2, totalItems: 5, totalPages: 3 });
      expect(res.body.items).toHaveLength(2);
      const item = res.body.items[0];
      expect(Object.keys(item).sort()).toEqual(['canManage', 'emailAddress', 'firstName', 'lastName', 'mainPupName', 'mainPupUid', 'userName', 'userUid'].sort());
      expect(item).toMatchObject({ canManage: true, emailAddress: `${tag}-0@example.test` });
      const p3 = await t.post('/v1/Account/GetAccounts', { pageNo: 3, pageSize: 2, emailAddress: tag });
      expect(p3.body.items.map((i: any) => i.emailAddress)).toEqual([`${tag}-4@example.test`]);
      const asB = await t.post('/v1/Account/GetAccounts', { pageNo: 1, pageSize: 10, emailAddress: tag }, tokB);
      expect(asB.body.items.map((i: any) => i.emailAddress)).toEqual([`${tag}-b@example.test`]);
    });

    it('honours the include flags (excluded fields are omitted; null means default)', async () => {
      const res = await t.post('/v1/Account/GetAccounts', {
        pageNo: 1, pageSize: 1, emailAddress: `${tag}-1@`,
        includeEmail: false, includeFullName: null, includeMainPup: false, includeAddress: true, includeLanguage: true, includeMailCode: true, includePhone: true,
      });
      expect(res.body.items[0]).toEqual({
        userUid: accts[1]!.userUid, userName: accts[1]!.userName, canManage: true, firstName: 'Piet', lastName: 'Vaart1',
        street: 'Kade 1', mailbox: '', city: 'Utrecht', countryCode: 'NL', languageCode: 'en', mailCode: accts[1]!.mailCode, phoneNumber: '+31610000001',
      });
    });

    it('filters by fullName, pupUid, phoneNumber, mailCode and userName', async () => {
      const q = async (f: Record<string, unknown>) =>
        (await t.post('/v1/Account/GetAccounts', { pageNo: 1, pageSize: 50, emailAddress: tag, ...f })).body.items.map((i: any) => i.userUid);
      expect(await q({ fullName: 'piet vaart' })).toEqual([accts[1]!.userUid, accts[3]!.userUid]);
      expect(await q({ fullName: 'Klaas Vaart4' })).toEqual([accts[4]!.userUid]);
      expect(await q({ pupUid: PUP_A2 })).toEqual([accts[3]!.userUid, accts[4]!.userUid]);
      expect(await q({ phoneNumber: '0031 610000002' })).toEqual([accts[2]!.userUid]);
      expect(await q({ mailCode: accts[0]!.mailCode.toLowerCase() })).toEqual([accts[0]!.userUid]);
      expect(await q({ userName: `${tag}-3` })).toEqual([accts[3]!.userUid]);
      expect(await q({ fullName: '100%_' })).toEqual([]);
    });

    it('answers InvalidPupUid for a pupUid filter the caller does not manage, InvalidRequest for bad paging', async () => {
      const res = await t.post('/v1/Account/GetAccounts', { pageNo: 1, pageSize: 10, pupUid: PUP_B1 });
      expect(res.body).toMatchObject({ success: false, error: 'InvalidPupUid' });
      const bad = await t.post('/v1/Account/GetAccounts', { pageNo: 0, pageSize: 501 });
      expect(bad.body).toMatchObject({ success: false, error: 'InvalidRequest' });
    });
  });

  describe('GetAccountPickUpPoint', () => {
    it('returns the main PUP with addresses, coordinates and the split mail code', async () => {
      const a = await create();
      const res = await t.post('/v1/Account/GetAccountPickUpPoint', { userUid: a.userUid });
      const [first, last] = a.mailCode.split('-');
      expect(res.body).toEqual({
        success: true, error: null, message: null, userUid: a.userUid, mailCode: a.mailCode, mailCodeFirstName: first, mailCodeLastName: last,
        pupUid: PUP_A1, name: 'Alpha Station', timeZone: 'Europe/Amsterdam',
        deliveryAddress: { streetName: 'Stationsplein 1', mailbox: 'Dock B', city: 'Amsterdam', countryIso2: 'NL', latitude: 52.3792, longitude: 4.9004 },
        locationAddress: { streetName: 'Stationsplein 1', mailbox: '', city: 'Amsterdam', countryIso2: 'NL', latitude: 52.379, longitude: 4.9 },
      });
    });

    it('a provisioned dispatcher account has its mail code from the start; GetAccountPickUpPoint only reads', async () => {
      const d = await t.post('/v1/Account/GetAccount', { emailAddress: DISPATCHER_A_EMAIL });
      expect(d.body.mailCode).toMatch(MAIL_CODE_RE);
      const res = await t.post('/v1/Account/GetAccountPickUpPoint', { userUid: d.body.userUid });
      expect(res.body.mailCode).toBe(d.body.mailCode);
      // an account without a code (data from before migration 102) is not given one by a read
      const a = await create();
      await t.ctx.db.kysely.updateTable('accounts').set({ mail_code: null }).where('uid', '=', a.userUid).execute();
      const before = await t.ctx.db.kysely.selectFrom('accounts').select(['mail_code', 'updated_at']).where('uid', '=', a.userUid).executeTakeFirstOrThrow();
      const read = await t.post('/v1/Account/GetAccountPickUpPoint', { userUid: a.userUid });
      expect(read.body).toMatchObject({ success: true, mailCode: null, mailCodeFirstName: null, mailCodeLastName: null, pupUid: PUP_A1 });
      expect(await t.ctx.db.kysely.selectFrom('accounts').select(['mail_code', 'updated_at']).where('uid', '=', a.userUid).executeTakeFirstOrThrow()).toEqual(before);
    });

    it('migration 102 gives every account without a mail code a unique one and leaves the others', async () => {
      const a = await create();
      const b = await create();
      const d = (await t.post('/v1/Account/GetAccount', { emailAddress: DISPATCHER_A_EMAIL })).body;
      await t.ctx.db.kysely.updateTable('accounts').set({ mail_code: null }).where('uid', 'in', [a.userUid, d.userUid]).execute();
      await migration102(t.ctx.db.kysely);
      const rows = await t.ctx.db.kysely.selectFrom('accounts').select(['uid', 'mail_code']).execute();
      expect(rows.filter((r) => r.mail_code === null)).toEqual([]);
      const codes = new Map(rows.map((r) => [r.uid, r.mail_code]));
      expect(codes.get(a.userUid)).toMatch(MAIL_CODE_RE);
      expect(codes.get(d.userUid)).toMatch(MAIL_CODE_RE);
      expect(codes.get(b.userUid)).toBe(b.mailCode);
      expect(new Set(rows.map((r) => r.mail_code)).size).toBe(rows.length);
    });

    it('answers InvalidUserUid for unknown and AccessDenied for unmanageable accounts', async () => {
      const a = await create();
      expect((await t.post('/v1/Account/GetAccountPickUpPoint', { userUid: UNKNOWN_UID })).body).toMatchObject({ error: 'InvalidUserUid' });
      expect((await t.post('/v1/Account/GetAccountPickUpPoint', {})).body).toMatchObject({ error: 'InvalidUserUid' });
      const denied = await t.post('/v1/Account/GetAccountPickUpPoint', { userUid: a.userUid }, tokB);
      expect(denied.body).toMatchObject({ success: false, error: 'AccessDenied', userUid: a.userUid });
      expect(denied.body.mailCode).toBeUndefined();
    });
  });

  describe('SetAccountDetails', () => {
    it('changes only the given fields and answers the documented shape', async () => {
      const a = await create({ phoneNumber: '+31612345678' });
      const res = await t.post('/v1/Account/SetAccountDetails', { userUid: a.userUid, languageCode: 'en-GB', firstName: 'Johan', lastName: 'Smit', phoneNumber: null });
      expect(res.body).toEqual({
        success: true, error: null, message: null, userUid: a.userUid, canManageUser: true, firstName: 'Johan', lastName: 'Smit', emailAddress: a.emailAddress,
        phoneNumber: '+31612345678', mainPupUid: PUP_A1, mainPupName: 'Alpha Station', languageCode: 'en-GB', mailCode: a.mailCode,
      });
      const addr = await t.post('/v1/Account/SetAccountDetails', { userUid: a.userUid, streetName: 'Rue Neuve', streetNo: '12a', mailbox: '3', city: 'Brussel', countryCode: 'be' });
      expect(addr.body.success).toBe(true);
      const got = await t.post('/v1/Account/GetAccount', { userUid: a.userUid });
      expect(got.body).toMatchObject({ street: 'Rue Neuve 12a', mailbox: '3', city: 'Brussel', countryCode: 'BE', firstName: 'Johan' });
      const newEmail = `renamed-${uniq()}@example.test`;
      const mail = await t.post('/v1/Account/SetAccountDetails', { userUid: a.userUid, emailAddress: newEmail, phoneNumber: '' });
      expect(mail.body).toMatchObject({ emailAddress: newEmail, phoneNumber: null });
      expect((await t.post('/v1/Account/GetAccount', { userUid: a.userUid })).body.userName).toBe(a.userName);
    });

    it('enforces the name group and the address group', async () => {
      const a = await create();
      const name = await t.post('/v1/Account/SetAccountDetails', { userUid: a.userUid, firstName: 'Only' });
      expect(name.body).toMatchObject({ success: false, error: 'InvalidRequest', message: expect.stringContaining('lastName') });
      const address = await t.post('/v1/Account/SetAccountDetails', { userUid: a.userUid, streetName: 'Dam', city: 'Amsterdam' });
      expect(address.body).toMatchObject({ success: false, error: 'InvalidRequest', message: expect.stringContaining('streetNo, mailbox, countryCode') });
      const country = await t.post('/v1/Account/SetAccountDetails', { userUid: a.userUid, streetName: 'Dam', streetNo: '1', mailbox: '', city: 'A', countryCode: 'ZZ' });
      expect(country.body).toMatchObject({ success: false, error: 'InvalidRequest', message: expect.stringContaining('countryCode') });
      const unchanged = await t.post('/v1/Account/GetAccount', { userUid: a.userUid });
      expect(unchanged.body).toMatchObject({ firstName: 'Jan', street: null });
    });

    it('answers EmailAlreadyRegistered for an e-mail address of another account', async () => {
      const a = await create();
      const b = await create();
      const res = await t.post('/v1/Account/SetAccountDetails', { userUid: a.userUid, emailAddress: b.emailAddress.toUpperCase() });
      expect(res.body).toMatchObject({ success: false, error: 'EmailAlreadyRegistered' });
      const own = await t.post('/v1/Account/SetAccountDetails', { userUid: a.userUid, emailAddress: a.emailAddress.toUpperCase() });
      expect(own.body).toMatchObject({ success: true, emailAddress: a.emailAddress.toUpperCase() });
    });

    it('answers InvalidUserUid for a missing or unknown userUid', async () => {
      for (const body of [{}, { userUid: null }, { userUid: UNKNOWN_UID }, { userUid: 'no such thing!' }]) {
        const res = await t.post('/v1/Account/SetAccountDetails', { ...body, languageCode: 'nl' });
        expect(res.body, JSON.stringify(body)).toMatchObject({ success: false, error: 'InvalidUserUid' });
      }
    });

    it("answers canManageUser false with all other fields null for another tenant's account, changing nothing", async () => {
      const a = await create();
      const res = await t.post('/v1/Account/SetAccountDetails', { userUid: a.userUid, firstName: 'Hacked', lastName: 'Name' }, tokB);
      expect(res.status).toBe(400);
      expect(res.body).toEqual({
        success: false, error: 'AccessDenied', message: expect.any(String), userUid: a.userUid, canManageUser: false,
        firstName: null, lastName: null, emailAddress: null, phoneNumber: null, mainPupUid: null, mainPupName: null, languageCode: null, mailCode: null,
      });
      expect((await t.post('/v1/Account/GetAccount', { userUid: a.userUid })).body.firstName).toBe('Jan');
    });

    it('lets the administrator API change fields the account itself may not (canChange* false)', async () => {
      const a = await create({ mutationConfig: { canChangePhoneNumber: false } });
      const res = await t.post('/v1/Account/SetAccountDetails', { userUid: a.userUid, phoneNumber: '+32470123456' });
      expect(res.body).toMatchObject({ success: true, phoneNumber: '+32470123456' });
    });
  });

  describe('SetAccountPickUpPoint', () => {
    it('moves the main PUP, keeps links consistent and reports whether it changed', async () => {
      const a = await create();
      const res = await t.post('/v1/Account/SetAccountPickUpPoint', { userUid: a.userUid, pickUpPointUid: PUP_A2 });
      expect(res.body).toEqual({ success: true, error: null, message: null, userUid: a.userUid, pupUid: PUP_A2, pickUpPointChanged: true });
      expect(await links(a.userUid)).toEqual([PUP_A2]);
      const same = await t.post('/v1/Account/SetAccountPickUpPoint', { userUid: a.userUid, pickUpPointUid: PUP_A2 });
      expect(same.body).toMatchObject({ success: true, pupUid: PUP_A2, pickUpPointChanged: false });
      const got = await t.post('/v1/Account/GetAccount', { userUid: a.userUid });
      expect(got.body).toMatchObject({ canManageUser: true, mainPupUid: PUP_A2, mainPupName: 'Alpha Harbour' });
    });

    it('answers InvalidPupUid, InvalidUserUid and AccessDenied', async () => {
      const a = await create();
      expect((await t.post('/v1/Account/SetAccountPickUpPoint', { userUid: a.userUid, pickUpPointUid: PUP_B1 })).body).toMatchObject({ error: 'InvalidPupUid' });
      expect((await t.post('/v1/Account/SetAccountPickUpPoint', { userUid: a.userUid })).body).toMatchObject({ error: 'InvalidPupUid' });
      expect((await t.post('/v1/Account/SetAccountPickUpPoint', { userUid: UNKNOWN_UID, pickUpPointUid: PUP_A2 })).body).toMatchObject({ error: 'InvalidUserUid' });
      const denied = await t.post('/v1/Account/SetAccountPickUpPoint', { userUid: a.userUid, pickUpPointUid: PUP_B1 }, tokB);
      expect(denied.body).toMatchObject({ success: false, error: 'AccessDenied', userUid: a.userUid, pickUpPointChanged: false });
      expect(await links(a.userUid)).toEqual([PUP_A1]);
    });
  });

  describe('mutation configuration', () => {
    it('reads the defaults and changes only non-null flags', async () => {
      const a = await create();
      const get = await t.post('/v1/Account/GetAccountMutationConfig', { userUid: a.userUid });
      expect(get.body).toEqual({ success: true, error: null, message: null, userUid: a.userUid, ...DEFAULT_FLAGS });
      const set = await t.post('/v1/Account/SetAccountMutationConfig', { userUid: a.userUid, canChangeAddress: false, canRemoveAutomatically: true, canChangePhoneNumber: null });
      expect(set.body).toEqual({ success: true, error: null, message: null, userUid: a.userUid, ...DEFAULT_FLAGS, canChangeAddress: false, canRemoveAutomatically: true });
      const none = await t.post('/v1/Account/SetAccountMutationConfig', { userUid: a.userUid });
      expect(none.body).toMatchObject({ canChangeAddress: false, canRemoveAutomatically: true, canChangePhoneNumber: true });
    });

    it('stores canChangeFirstName and canChangeLastName independently', async () => {
      const a = await create();
      const res = await t.post('/v1/Account/SetAccountMutationConfig', { userUid: a.userUid, canChangeFirstName: false, canChangeAddress: false });
      expect(res.body).toMatchObject({ success: true, canChangeFirstName: false, canChangeLastName: true, canChangeAddress: false });
      const last = await t.post('/v1/Account/SetAccountMutationConfig', { userUid: a.userUid, canChangeFirstName: true, canChangeLastName: false });
      expect(last.body).toMatchObject({ success: true, canChangeFirstName: true, canChangeLastName: false });
      const get = await t.post('/v1/Account/GetAccountMutationConfig', { userUid: a.userUid });
      expect(get.body).toMatchObject({ canChangeFirstName: true, canChangeLastName: false, canChangeAddress: false });
    });

    it('answers InvalidUserUid and AccessDenied', async () => {
      const a = await create();
      expect((await t.post('/v1/Account/SetAccountMutationConfig', { canChangeAddress: false })).body).toMatchObject({ error: 'InvalidUserUid' });
      expect((await t.post('/v1/Account/GetAccountMutationConfig', { userUid: UNKNOWN_UID })).body).toMatchObject({ error: 'InvalidUserUid' });
      expect((await t.post('/v1/Account/SetAccountMutationConfig', { userUid: a.userUid, canChangeAddress: false }, tokB)).body).toMatchObject({ error: 'AccessDenied' });
      expect((await t.post('/v1/Account/GetAccountMutationConfig', { userUid: a.userUid }, tokB)).body).toMatchObject({ error: 'AccessDenied' });
    });
  });

  describe('RemoveAccount', () => {
    it('removes a manageable account, also when canRemoveManually is false (the tenant API is an administrator)', async () => {
      const a = await create({ mutationConfig: { canRemoveManually: false } });
      const res = await t.post('/v1/Account/RemoveAccount', { userUid: a.userUid });
      expect(res.body).toEqual({ success: true, error: null, message: null });
      expect((await t.post('/v1/Account/GetAccount', { userUid: a.userUid })).body).toMatchObject({ isExisting: false, userUid: null });
      expect(await links(a.userUid)).toEqual([]);
      // the e-mail address is free again
      await create({ emailAddress: a.emailAddress });
    });

    it('answers AccountInUse while the account has an active shipment', async () => {
      const a = await create();
      const ship = await t.post('/v1/Logistics/CreateLocalShipment', {
        ToUserUid: a.userUid, PupUid: PUP_A1, Dimension: { width: 10, height: 5, length: 10 }, AllowLargerLockers: true, AllowOverflowLockers: false,
      });
      expect(ship.body.success, JSON.stringify(ship.body)).toBe(true);
      const res = await t.post('/v1/Account/RemoveAccount', { userUid: a.userUid });
      expect(res.body).toMatchObject({ success: false, error: 'AccountInUse' });
      expect((await t.post('/v1/Logistics/CancelShipment', { shipmentUid: ship.body.shipmentUid })).body.success).toBe(true);
      expect((await t.post('/v1/Account/RemoveAccount', { userUid: a.userUid })).body.success).toBe(true);
    });

    it('answers InvalidUserUid, AccessDenied for another tenant, AccessDenied for a dispatcher main account', async () => {
      const a = await create();
      expect((await t.post('/v1/Account/RemoveAccount', {})).body).toMatchObject({ success: false, error: 'InvalidUserUid' });
      expect((await t.post('/v1/Account/RemoveAccount', { userUid: UNKNOWN_UID })).body).toMatchObject({ success: false, error: 'InvalidUserUid' });
      expect((await t.post('/v1/Account/RemoveAccount', { userUid: a.userUid }, tokB)).body).toMatchObject({ success: false, error: 'AccessDenied' });
      expect((await t.post('/v1/Account/GetAccount', { userUid: a.userUid })).body.isExisting).toBe(true);
      const d = await t.post('/v1/Account/GetAccount', { emailAddress: DISPATCHER_A_EMAIL });
      expect((await t.post('/v1/Account/RemoveAccount', { userUid: d.body.userUid })).body).toMatchObject({ success: false, error: 'AccessDenied' });
    });
  });

  it('accepts PascalCase keys like the API samples', async () => {
    const email = `pascal-${uniq()}@example.test`;
    const res = await t.post('/v1/Account/CreateAccount', { EmailAddress: email, FirstName: 'P', LastName: 'C', PickUpPointUid: PUP_A1 });
    expect(res.body).toMatchObject({ success: true, emailAddress: email });
  });

  it('needs a token', async () => {
    const res = await t.post('/v1/Account/GetAccount', {}, null);
    expect(res.status).toBe(401);
    expect(res.body).toMatchObject({ success: false, error: 'Unauthorized' });
  });
});
