// Issue 12, item 4: the search inputs of GetAccounts and GetAccountSuggestions are bounded (words,
// characters), a request past a bound is InvalidRequest naming the field and the limit, and the
// matching (instr/strpos instead of LIKE) keeps its meaning: every word, ignoring case, `%` and `_`
// as ordinary characters. The cost of the worst allowed input is measured in
// bench/search.bench.ts (docs/benchmarks.md).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestService, describeEngines, type TestService } from './support/harness';
import { PUP_A1 } from './support/fixtures';
import { queryWords, SEARCH_LIMITS, wordsOf } from '../src/accounts/search';

describe('search words', () => {
  it('drops repeated words and words inside another word; counts words as sent', () => {
    expect(queryWords('  Anna anna ANN  de Vries  ')).toEqual(['vries', 'anna', 'de']);
    expect(queryWords('a a a a a')).toEqual(['a']);
    expect(queryWords(null)).toEqual([]);
    expect(wordsOf(' a  b\tc ')).toEqual(['a', 'b', 'c']);
  });
});

describeEngines('search limits', (engine) => {
  let t: TestService;
  const L = SEARCH_LIMITS;
  const tag = `sl${Date.now().toString(36)}`;
  beforeAll(async () => {
    t = await createTestService(engine);
    for (const [first, last] of [['Anna', 'de Vries'], ['Per_cent', '100%'], ['Bram', 'Peeters']]) {
      const res = await t.post('/v1/Account/CreateAccount', { emailAddress: `${first.toLowerCase().replace(/\W/g, '')}.${tag}@example.test`, firstName: first, lastName: last, pickUpPointUid: PUP_A1, phoneNumber: '+31612345678' });
      expect(res.body.success, JSON.stringify(res.body)).toBe(true);
    }
  });
  afterAll(async () => t?.close());

  const accounts = (body: Record<string, unknown>) => t.post('/v1/Account/GetAccounts', { pageNo: 1, pageSize: 100, ...body });
  const suggestions = (body: Record<string, unknown>) => t.post('/v1/Account/GetAccountSuggestions', { pageNo: 1, pageSize: 100, ...body });
  const refused = (res: { status: number; body: any }, message: string) => {
    expect(res.status, JSON.stringify(res.body)).toBe(400);
    expect(res.body).toEqual({ success: false, error: 'InvalidRequest', message });
  };

  it(`fullName: at most ${SEARCH_LIMITS.maxWords} words (the issue's 160 one-letter words are refused)`, async () => {
    const issue = await accounts({ fullName: Array(160).fill('a').join(' ') });
    expect(issue.status).toBe(400);
    expect(issue.body).toMatchObject({ success: false, error: 'InvalidRequest', message: expect.stringMatching(/^fullName: at most /) });
    refused(await accounts({ fullName: Array(100).fill('a').join(' ') }), `fullName: at most ${L.maxWords} words`);
    refused(await accounts({ fullName: Array(L.maxWords + 1).fill('x').join(' ') }), `fullName: at most ${L.maxWords} words`);
    const ok = await accounts({ fullName: Array(L.maxWords).fill('a').join(' '), emailAddress: tag });
    expect(ok.body.success, JSON.stringify(ok.body)).toBe(true);
    expect(ok.body.totalItems).toBe(2); // Anna de Vries, Bram Peeters
  });

  it('every text filter has a length limit, named in the message', async () => {
    const long = (n: number) => 'a'.repeat(n);
    refused(await accounts({ fullName: long(L.maxLength + 1) }), `fullName: at most ${L.maxLength} characters`);
    refused(await accounts({ userName: long(L.maxLength + 1) }), `userName: at most ${L.maxLength} characters`);
    refused(await accounts({ emailAddress: long(L.maxLength + 1) }), `emailAddress: at most ${L.maxLength} characters`);
    refused(await accounts({ phoneNumber: '1'.repeat(L.maxPhoneLength + 1) }), `phoneNumber: at most ${L.maxPhoneLength} characters`);
    refused(await accounts({ mailCode: long(L.maxMailCodeLength + 1) }), `mailCode: at most ${L.maxMailCodeLength} characters`);
    refused(await accounts({ pupUid: long(L.maxPupUidLength + 1) }), `pupUid: at most ${L.maxPupUidLength} characters`);
    refused(await suggestions({ searchText: long(L.maxLength + 1) }), `searchText: at most ${L.maxLength} characters`);
    refused(await suggestions({ searchText: Array(L.maxWords + 1).fill('x').join(' ') }), `searchText: at most ${L.maxWords} words`);
    refused(await suggestions({ pupUid: long(L.maxPupUidLength + 1) }), `pupUid: at most ${L.maxPupUidLength} characters`);
    // at the limit: accepted
    for (const body of [{ fullName: long(L.maxLength) }, { userName: long(L.maxLength) }, { emailAddress: long(L.maxLength) }, { phoneNumber: '1'.repeat(L.maxPhoneLength) }, { mailCode: long(L.maxMailCodeLength) }]) {
      const res = await accounts(body);
      expect(res.body, JSON.stringify(body)).toMatchObject({ success: true, totalItems: 0 });
    }
    expect((await suggestions({ searchText: long(L.maxLength) })).body).toMatchObject({ success: true, totalItems: 0 });
  });

  it('matching keeps its meaning: every word, ignoring case, no wildcards', async () => {
    const names = async (body: Record<string, unknown>) => ((await accounts({ emailAddress: tag, ...body })).body.items as any[]).map((i) => i.firstName).sort();
    expect(await names({ fullName: 'VRIES anna' })).toEqual(['Anna']);
    expect(await names({ fullName: 'anna  ann ANNA' })).toEqual(['Anna']);
    expect(await names({ fullName: 'anna bram' })).toEqual([]);
    expect(await names({ fullName: '%' })).toEqual(['Per_cent']);
    expect(await names({ fullName: '_' })).toEqual(['Per_cent']);
    expect(await names({ fullName: 'r%' })).toEqual([]);
    expect(await names({ userName: `ANNA.${tag.toUpperCase()}` })).toEqual(['Anna']);
    expect(await names({ emailAddress: `BRAM.${tag}@` })).toEqual(['Bram']);
    expect(await names({ phoneNumber: '0031 6 1234' })).toEqual(['Anna', 'Bram', 'Per_cent']);
    expect(await names({ phoneNumber: '+31 6 9' })).toEqual([]);
  });
});
