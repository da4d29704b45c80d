// The booking preset of bench/profile-endpoint.ts (kept under its old name): a CPU profile of the
// real CreateLocalShipment endpoint under the shipments bench's load. Any endpoint:
// `npx tsx --conditions=@locker/source bench/profile-endpoint.ts --help`.
//
//   npx tsx --conditions=@locker/source bench/profile-booking.ts
process.argv.splice(2, process.argv.length - 2, 'booking');
await import('./profile-endpoint');
export {};
