// Tables of the accounts area (migration 101_account_suggestions). Account rows themselves are a
// foundation table (schema.ts: accounts, account_pups).

/** One UploadAccountSuggestions call that was accepted (header valid). Per tenant only the newest
 * upload is 'active'; earlier ones are 'expired' and their suggestion rows are deleted. The row
 * keeps counts only, no personal data. */
export interface AccountSuggestionUploadsTable {
  uid: string;
  tenant_uid: string;
  reference: string;
  file_name: string;
  /** csv | xlsx | xls */
  file_type: string;
  status: 'active' | 'expired';
  total_count: number;
  imported_count: number;
  existed_count: number;
  removed_count: number;
  error_count: number;
  created_at: string;
  expired_at: string | null;
}

/** A suggested account from the active upload of a tenant. Never an account: no uid, not found by
 * GetAccount/GetAccounts. One row per e-mail address per upload. */
export interface AccountSuggestionsTable {
  upload_uid: string;
  tenant_uid: string;
  /** row number in the uploaded file (the header is row 1) */
  row_no: number;
  email_address: string;
  email_key: string;
  phone_number: string | null;
  language_code: string | null;
  first_name: string | null;
  last_name: string | null;
  remarks: string | null;
  pup_uid: string | null;
}

export interface AccountTables {
  account_suggestion_uploads: AccountSuggestionUploadsTable;
  account_suggestions: AccountSuggestionsTable;
}
