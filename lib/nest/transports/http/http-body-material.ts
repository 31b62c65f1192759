import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { IdempotencyRequestInvalidError } from '../../../core/errors.js';

/** A file multer put on the request (`FileInterceptor`, `FilesInterceptor`, `FileFieldsInterceptor`), memory or disk storage. */
interface UploadedFileLike {
  fieldname?: string;
  originalname?: string;
  mimetype?: string;
  size?: number;
  buffer?: Buffer;
  path?: string;
}

/** What of an HTTP request's body the fingerprint reads besides the parsed `body`. */
export interface BodyCarrier {
  method?: string;
  url?: string;
  headers: Record<string, string | string[] | undefined>;
  body?: unknown;
  rawBody?: unknown;
  file?: unknown;
  files?: unknown;
}

/** What identifies one uploaded file: its field, name, type, size and a SHA-256 of its bytes. */
export interface FileMaterial {
  field?: string;
  name?: string;
  type?: string;
  size?: number;
  sha256: string;
}

/**
 * The parts of a body that `request.body` does not show: the raw bytes when Nest keeps them
 * (`NestFactory.create(AppModule, { rawBody: true })`), and the files multer parsed
 * (contents hashed, read from memory or from disk). `undefined` when there are none.
 * Refuses a body that nothing shows (bytes on the wire, no parser read them, no raw body
 * kept) with a 400: fingerprinted as "no body", another body under the same key would be
 * replayed.
 */
export function hiddenBodyMaterial(request: BodyCarrier): Promise<Record<string, unknown>> | Record<string, unknown> | undefined {
  const files = uploadedFiles(request);
  const raw = Buffer.isBuffer(request.rawBody) ? sha256(request.rawBody) : undefined;
  if (!files) {
    if (raw !== undefined) return { raw };
    if (isInvisibleBody(request)) throw invisibleBodyError(request);
    return undefined;
  }
  return Promise.all(files.entries.map(fileMaterial)).then((described) => {
    const material: Record<string, unknown> = { files: files.grouped ? group(described) : described };
    if (raw !== undefined) material.raw = raw;
    return material;
  });
}

function uploadedFiles(request: BodyCarrier): { entries: UploadedFileLike[]; grouped: boolean } | undefined {
  const entries: UploadedFileLike[] = [];
  if (isFile(request.file)) entries.push(request.file);
  const files = request.files;
  let grouped = false;
  if (Array.isArray(files)) entries.push(...files.filter(isFile));
  else if (files && typeof files === 'object') {
    // FileFieldsInterceptor: { avatar: [file], background: [file] }
    grouped = true;
    for (const name of Object.keys(files).sort()) {
      const list = (files as Record<string, unknown>)[name];
      if (Array.isArray(list)) entries.push(...list.filter(isFile));
    }
  }
  return entries.length > 0 ? { entries, grouped } : undefined;
}

function isFile(value: unknown): value is UploadedFileLike {
  const file = value as UploadedFileLike | null;
  return typeof file === 'object' && file !== null && (Buffer.isBuffer(file.buffer) || typeof file.path === 'string');
}

async function fileMaterial(file: UploadedFileLike): Promise<FileMaterial> {
  const digest = Buffer.isBuffer(file.buffer) ? sha256(file.buffer) : await sha256OfFile(file.path!);
  return { field: file.fieldname, name: file.originalname, type: file.mimetype, size: file.size, sha256: digest };
}

function group(files: FileMaterial[]): Record<string, FileMaterial[]> {
  const byField: Record<string, FileMaterial[]> = {};
  for (const file of files) (byField[file.field ?? ''] ??= []).push(file);
  return byField;
}

function sha256(bytes: Buffer): string {
  return createHash('sha256').update(bytes).digest('base64url');
}

function sha256OfFile(path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const hash = createHash('sha256');
    createReadStream(path)
      .on('data', (chunk) => hash.update(chunk))
      .on('error', reject)
      .on('end', () => resolve(hash.digest('base64url')));
  });
}

/** Bytes were sent, and neither a body parser nor Nest's raw body capture kept them. */
function isInvisibleBody(request: BodyCarrier): boolean {
  const headers = request.headers;
  const length = Number(headers['content-length'] ?? 0);
  if (!(length > 0) && headers['transfer-encoding'] === undefined) return false;
  const body = request.body;
  // `null` is a parsed JSON body; `undefined`, no parser ran (Express 5, Fastify).
  if (body === undefined) return true;
  if (body === null) return false;
  if (typeof body !== 'object' || Buffer.isBuffer(body)) return false;
  // Express 4's parsers leave `{}` on a body of a type they do not read.
  return Object.keys(body).length === 0 && !/json|x-www-form-urlencoded/i.test(String(headers['content-type'] ?? ''));
}

function invisibleBodyError(request: BodyCarrier): IdempotencyRequestInvalidError {
  const type = request.headers['content-type'];
  return new IdempotencyRequestInvalidError(
    `its body (${type === undefined ? 'no content-type' : `content-type ${String(type)}`}) was read by no body parser, so its fingerprint cannot tell it from another body`,
    'Send the body with a content type the server parses (e.g. application/json). Servers: create the application with ' +
      'NestFactory.create(AppModule, { rawBody: true }) so that the raw bytes are fingerprinted, add a parser for that type, ' +
      'or give the route fingerprint: (ctx) => ... (or fingerprint: false).',
  );
}
