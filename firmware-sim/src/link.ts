// The physical side of a simulated bus or scanner: either a socat pseudo-terminal pair (the agent
// opens a tty path, as it would /dev/ttyUSB0) or a TCP listener (an RS485-to-Ethernet gateway).
import net from 'node:net';
import { SerialPort } from 'serialport';
import type { Logger } from 'pino';
import { PtyPair } from './pty';
import { SimError } from './errors';

export interface Link {
  readonly agentPath: string | null;
  readonly tcpPort: number | null;
  readonly plugged: boolean;
  onData: (chunk: Buffer) => void;
  start(): Promise<void>;
  stop(): Promise<void>;
  unplug(): Promise<void>;
  replug(): Promise<void>;
  write(chunk: Buffer): void;
}

export class PtyLink implements Link {
  onData: (chunk: Buffer) => void = () => undefined;
  private pair: PtyPair;
  private port: SerialPort | null = null;
  private isPlugged = false;

  constructor(
    readonly agentPath: string,
    simPath: string,
    private readonly baudRate: number,
    private readonly log: Logger,
  ) {
    this.pair = new PtyPair(agentPath, simPath, log);
  }

  get tcpPort(): null {
    return null;
  }

  get plugged(): boolean {
    return this.isPlugged;
  }

  async start(): Promise<void> {
    await this.pair.start();
    try {
      await this.openPort();
    } catch (err) {
      await this.pair.stop();
      throw err;
    }
    this.isPlugged = true;
  }

  private openPort(): Promise<void> {
    return new Promise((resolve, reject) => {
      const port = new SerialPort({ path: this.pair.simPath, baudRate: this.baudRate, autoOpen: false });
      port.open((err) => {
        if (err) return reject(new SimError('SIM_SOCAT_FAILED', `cannot open ${this.pair.simPath}: ${err.message}`));
        this.port = port;
        port.on('data', (chunk: Buffer) => {
          if (this.port === port) this.onData(chunk);
        });
        port.on('error', (e) => {
          // After socat is killed the sim end reports EIO/EBADF; expected during unplug/stop.
          if (this.port === port) this.log.warn({ err: e.message }, 'sim-side port error');
        });
        port.on('close', () => {
          if (this.port === port) this.port = null;
        });
        resolve();
      });
    });
  }

  private async closePort(): Promise<void> {
    const port = this.port;
    this.port = null;
    if (!port || !port.isOpen) return;
    await new Promise<void>((resolve) => port.close(() => resolve()));
  }

  write(chunk: Buffer): void {
    if (!this.port || !this.isPlugged) return;
    this.port.write(chunk);
  }

  async unplug(): Promise<void> {
    if (!this.isPlugged) return;
    this.isPlugged = false;
    await this.closePort();
    await this.pair.stop();
  }

  async replug(): Promise<void> {
    if (this.isPlugged) return;
    await this.pair.start();
    await this.openPort();
    this.isPlugged = true;
  }

  async stop(): Promise<void> {
    this.isPlugged = false;
    await this.closePort();
    await this.pair.stop();
  }
}

export class TcpLink implements Link {
  onData: (chunk: Buffer) => void = () => undefined;
  private server: net.Server | null = null;
  private sockets = new Set<net.Socket>();
  private port: number | null = null;
  private isPlugged = false;

  constructor(
    private readonly requestedPort: number,
    private readonly host: string,
    private readonly log: Logger,
  ) {}

  get agentPath(): null {
    return null;
  }

  get tcpPort(): number | null {
    return this.port;
  }

  get plugged(): boolean {
    return this.isPlugged;
  }

  async start(): Promise<void> {
    await this.listen(this.requestedPort);
  }

  private listen(port: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const server = net.createServer((sock) => {
        sock.setNoDelay(true);
        this.sockets.add(sock);
        this.log.debug({ remote: sock.remotePort }, 'gateway client connected');
        sock.on('data', (chunk: Buffer) => this.onData(chunk));
        sock.on('error', () => undefined);
        sock.on('close', () => this.sockets.delete(sock));
      });
      server.once('error', (err) => reject(new SimError('SIM_PATH_IN_USE', `cannot listen on ${port}: ${err.message}`)));
      server.listen(port, this.host, () => {
        const addr = server.address();
        this.port = typeof addr === 'object' && addr ? addr.port : port;
        this.server = server;
        this.isPlugged = true;
        resolve();
      });
    });
  }

  write(chunk: Buffer): void {
    if (!this.isPlugged) return;
    for (const s of this.sockets) s.write(chunk);
  }

  private async close(): Promise<void> {
    this.isPlugged = false;
    const server = this.server;
    this.server = null;
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /** The gateway goes away: the listener closes and every connection is dropped. */
  async unplug(): Promise<void> {
    await this.close();
  }

  /** The gateway comes back on the same port. */
  async replug(): Promise<void> {
    if (this.isPlugged) return;
    await this.listen(this.port ?? this.requestedPort);
  }

  async stop(): Promise<void> {
    await this.close();
  }
}
