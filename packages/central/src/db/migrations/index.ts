// Versioned migrations, applied in name order on both engines. Each area owns a number range:
// 0xx foundation, 1xx accounts, 2xx shipments, 3xx callbacks/outbox, 4xx edge sync.
import type { Migration } from 'kysely';
import * as m001 from './001_foundation';
import * as m101 from './101_account_suggestions';
import * as m102 from './102_account_mail_codes';
import * as m200 from './200_shipments';
import * as m201 from './201_booking_candidates';
import * as m202 from './202_booking_write_path';
import * as m203 from './203_codes_valid_lookup';
import * as m204 from './204_door_time';
import * as m205 from './205_listing_order';
import * as m206 from './206_shipment_items';
import * as m207 from './207_shipment_items_pg';
import * as m300 from './300_callbacks';
import * as m301 from './301_outbox_indexes';
import * as m302 from './302_outbox_park';
import * as m400 from './400_edge';
import * as m401 from './401_edge_seq_bigint';
import * as m402 from './402_pup_code_versions';
import * as m403 from './403_terminal_clock';
import * as m404 from './404_lock_observations';
import * as m405 from './405_edge_ordering';
import * as m406 from './406_pin_throttle';
import * as m407 from './407_account_search';
import * as m408 from './408_edge_lockers';
import * as m409 from './409_terminal_secret_fast';
import * as m410 from './410_terminals_pup';
import * as m411 from './411_lockers_pup_updated';
import * as m412 from './412_edge_live_journal';
import * as m413 from './413_edge_journals';

export const migrations: Record<string, Migration> = {
  '001_foundation': m001,
  '101_account_suggestions': m101,
  '102_account_mail_codes': m102,
  '200_shipments': m200,
  '201_booking_candidates': m201,
  '202_booking_write_path': m202,
  '203_codes_valid_lookup': m203,
  '204_door_time': m204,
  '205_listing_order': m205,
  '206_shipment_items': m206,
  '207_shipment_items_pg': m207,
  '300_callbacks': m300,
  '301_outbox_indexes': m301,
  '302_outbox_park': m302,
  '400_edge': m400,
  '401_edge_seq_bigint': m401,
  '402_pup_code_versions': m402,
  '403_terminal_clock': m403,
  '404_lock_observations': m404,
  '405_edge_ordering': m405,
  '406_pin_throttle': m406,
  '407_account_search': m407,
  '408_edge_lockers': m408,
  '409_terminal_secret_fast': m409,
  '410_terminals_pup': m410,
  '411_lockers_pup_updated': m411,
  '412_edge_live_journal': m412,
  '413_edge_journals': m413,
};
