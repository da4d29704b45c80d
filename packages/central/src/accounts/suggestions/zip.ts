// A guard against ZIP bombs for .xlsx uploads: SheetJS inflates every entry of the container in
// one synchronous call, with no bound on the unpacked size, so a small file whose sheet unpacks to
// hundreds of megabytes freezes the event loop (one process serves every tenant and the MQTT
// broker). Before the workbook is read, the ZIP central directory is read here and the declared
// sizes are checked; then each compressed entry is inflated with its declared size as the hard
// output bound, so an entry that lies about its size is refused as well. Pure: bytes in, sizes
// out or an error.
import zlib from 'node:zlib';

export interface ZipEntry {
  name: string;
  method: number;
  compressedSize: number;
  uncompressedSize: number;
  localHeaderOffset: number;
}

export class ZipLimitError extends Error {
  constructor(
    readonly kind: 'malformed' | 'zip64' | 'tooLarge' | 'ratio',
    message: string,
  ) {
    super(message);
    this.name = 'ZipLimitError';
  }
}

const EOCD_SIG = 0x06054b50;
const CEN_SIG = 0x02014b50;
const LOC_SIG = 0x04034b50;
const EOCD_LEN = 22;

/**
 * The entries of a ZIP file's central directory (End Of Central Directory record, then each
 * central directory header). ZIP64 markers (0xFFFF / 0xFFFFFFFF in a count, size or offset) are
 * refused: no workbook within the upload limit needs them. Anything that does not add up is
 * 'malformed'.
 */
export function readZipDirectory(buf: Uint8Array): ZipEntry[] {
  const dv = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  let eocd = -1;
  // the record is 22 bytes plus a comment of at most 65535 bytes, at the very end
  for (let i = buf.length - EOCD_LEN; i >= Math.max(0, buf.length - EOCD_LEN - 0xffff); i--) {
    if (dv.getUint32(i, true) === EOCD_SIG && i + EOCD_LEN + dv.getUint16(i + 20, true) === buf.length) {
      eocd = i;
      break;
    }
  }
  if (eocd < 0) throw new ZipLimitError('malformed', 'no ZIP end of central directory record');
  const count = dv.getUint16(eocd + 10, true);
  const cdSize = dv.getUint32(eocd + 12, true);
  const cdOffset = dv.getUint32(eocd + 16, true);
  if (count === 0xffff || cdSize === 0xffffffff || cdOffset === 0xffffffff) throw new ZipLimitError('zip64', 'ZIP64 containers are not supported');
  if (cdOffset + cdSize > eocd) throw new ZipLimitError('malformed', 'the ZIP central directory lies outside the file');
  const entries: ZipEntry[] = [];
  let p = cdOffset;
  for (let n = 0; n < count; n++) {
    if (p + 46 > cdOffset + cdSize || dv.getUint32(p, true) !== CEN_SIG) throw new ZipLimitError('malformed', 'a ZIP central directory entry is damaged');
    const method = dv.getUint16(p + 10, true);
    const compressedSize = dv.getUint32(p + 20, true);
    const uncompressedSize = dv.getUint32(p + 24, true);
    const nameLen = dv.getUint16(p + 28, true);
    const extraLen = dv.getUint16(p + 30, true);
    const commentLen = dv.getUint16(p + 32, true);
    const localHeaderOffset = dv.getUint32(p + 42, true);
    if (compressedSize === 0xffffffff || uncompressedSize === 0xffffffff || localHeaderOffset === 0xffffffff) throw new ZipLimitError('zip64', 'ZIP64 containers are not supported');
    const name = new TextDecoder().decode(buf.subarray(p + 46, p + 46 + nameLen));
    entries.push({ name, method, compressedSize, uncompressedSize, localHeaderOffset });
    p += 46 + nameLen + extraLen + commentLen;
  }
  return entries;
}

export interface ZipLimits {
  /** the most bytes all entries together may unpack to */
  maxUnpackedBytes: number;
  /** the highest compression ratio (unpacked / packed) of an entry that unpacks to more than 1 MiB */
  maxRatio: number;
}

const RATIO_FLOOR = 1_048_576;

/**
 * Checks the declared sizes against the limits, then inflates each deflated entry with its
 * declared size as the output bound (zlib stops there): an entry that unpacks to more than it
 * declares, or does not inflate, is refused. Returns the total unpacked size.
 */
export function checkZipLimits(buf: Uint8Array, limits: ZipLimits): number {
  const entries = readZipDirectory(buf);
  let total = 0;
  for (const e of entries) {
    total += e.uncompressedSize;
    if (total > limits.maxUnpackedBytes) throw new ZipLimitError('tooLarge', `the workbook unpacks to more than the limit of ${limits.maxUnpackedBytes} bytes`);
    if (e.uncompressedSize > RATIO_FLOOR && e.uncompressedSize / Math.max(1, e.compressedSize) > limits.maxRatio) {
      throw new ZipLimitError('ratio', `a part of the workbook is compressed more than ${limits.maxRatio} to 1`);
    }
  }
  const dv = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  for (const e of entries) {
    const p = e.localHeaderOffset;
    if (p + 30 > buf.length || dv.getUint32(p, true) !== LOC_SIG) throw new ZipLimitError('malformed', 'a ZIP local file header is damaged');
    const start = p + 30 + dv.getUint16(p + 26, true) + dv.getUint16(p + 28, true);
    if (start + e.compressedSize > buf.length) throw new ZipLimitError('malformed', 'a ZIP entry lies outside the file');
    if (e.method !== 8) continue; // stored (or unsupported, which SheetJS refuses): bounded by the file size
    let out: Buffer;
    try {
      out = zlib.inflateRawSync(buf.subarray(start, start + e.compressedSize), { maxOutputLength: Math.max(1, e.uncompressedSize) });
    } catch (err) {
      if ((err as { code?: string }).code === 'ERR_BUFFER_TOO_LARGE') throw new ZipLimitError('tooLarge', 'a part of the workbook unpacks to more than its declared size');
      throw new ZipLimitError('malformed', 'a part of the workbook cannot be unpacked');
    }
    if (out.length !== e.uncompressedSize) throw new ZipLimitError('malformed', 'a part of the workbook does not unpack to its declared size');
  }
  return total;
}
