import { ApolloServer, HeaderMap, type BaseContext, type HTTPGraphQLRequest } from '@apollo/server';
import { ApolloServerPluginDrainHttpServer } from '@apollo/server/plugin/drainHttpServer';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import type { IncomingMessage, ServerResponse } from 'node:http';

type ExpressRequest = IncomingMessage & { body?: unknown; url: string; method: string };
type ExpressResponse = ServerResponse & { send?(body: string): unknown };
type Next = (error?: unknown) => void;

/**
 * Nest's ApolloDriver on Express, with the few lines of `@as-integrations/express5`
 * (Apollo Server's Express 5 middleware) written out here, because this repository
 * does not install that package. Apollo Server, the schema, Nest's resolvers, guards and
 * exception handling are all the real ones: only the HTTP glue between Express and
 * `ApolloServer.executeHTTPGraphQLRequest()` is local.
 *
 * An application installs `@as-integrations/express5` and uses `ApolloDriver` itself.
 */
export class ApolloExpressDriver extends ApolloDriver {
  protected override async registerExpress(options: ApolloDriverConfig, { preStartHook }: { preStartHook?: () => void } = {}) {
    const { path = '/graphql', context } = options;
    const httpAdapter = this.httpAdapterHost.httpAdapter;
    const app = httpAdapter.getInstance<{
      use(path: string, handler: (req: ExpressRequest, res: ExpressResponse, next: Next) => void): void;
    }>();
    const drain = ApolloServerPluginDrainHttpServer({ httpServer: httpAdapter.getHttpServer() });
    preStartHook?.();
    const server = new ApolloServer<BaseContext>({
      ...(options as Record<string, unknown>),
      plugins: [...(options.plugins ?? []), drain],
    } as ConstructorParameters<typeof ApolloServer<BaseContext>>[0]);
    await server.start();
    app.use(path, (req, res, next) => {
      const headers = new HeaderMap();
      for (const [name, value] of Object.entries(req.headers)) {
        if (value !== undefined) headers.set(name, Array.isArray(value) ? value.join(', ') : value);
      }
      const url = new URL(req.url, 'http://localhost');
      const request: HTTPGraphQLRequest = { method: req.method.toUpperCase(), headers, search: url.search, body: req.body ?? {} };
      const makeContext = typeof context === 'function' ? () => context({ req, res }) : async () => ({ req });
      server
        .executeHTTPGraphQLRequest({ httpGraphQLRequest: request, context: makeContext })
        .then(async (response) => {
          for (const [name, value] of response.headers) res.setHeader(name, value);
          res.statusCode = response.status ?? 200;
          if (response.body.kind === 'complete') {
            res.end(response.body.string);
            return;
          }
          for await (const chunk of response.body.asyncIterator) res.write(chunk);
          res.end();
        })
        .catch(next);
    });
    this.apolloServer = server as unknown as typeof this.apolloServer;
  }
}
