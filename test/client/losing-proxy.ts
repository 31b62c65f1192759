import { createServer, connect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

/**
 * A TCP proxy in front of the app that lets the first `lose` connections' requests
 * through and kills the client's socket as soon as the answer starts coming back: the
 * server ran the handler and stored its answer, the caller never got it.
 */
export class LosingProxy {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  lost = 0;
  base = '';

  constructor(
    private readonly upstreamPort: number,
    private lose: number,
  ) {}

  async start(): Promise<void> {
    this.server = createServer((client) => {
      const upstream = connect(this.upstreamPort, '127.0.0.1');
      this.sockets.add(client).add(upstream);
      const losing = this.lose > 0;
      if (losing) this.lose--;
      client.pipe(upstream);
      upstream.on('data', (chunk) => {
        if (losing) {
          this.lost++;
          client.destroy();
          upstream.destroy();
        } else {
          client.write(chunk);
        }
      });
      upstream.on('end', () => client.end());
      for (const socket of [client, upstream]) socket.on('error', () => socket.destroy());
      client.on('close', () => upstream.destroy());
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.base = `http://127.0.0.1:${(this.server!.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server?.close(() => resolve()));
  }
}
