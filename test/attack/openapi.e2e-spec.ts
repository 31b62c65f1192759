import { VersioningType } from '@nestjs/common';
import { CONTROLLERS, createApp, documentOf, operationOf } from '../openapi/openapi-app.js';

/** The OpenAPI contract (issue 29) of applications shaped in ways its own suite does not try. */
describe('OpenAPI: hostile applications', () => {
  it('createDocument twice, before and after init(), under a global prefix and URI versioning, gives the same operation', async () => {
    const app = await createApp('express', { controllers: CONTROLLERS });
    app.setGlobalPrefix('api');
    app.enableVersioning({ type: VersioningType.URI, defaultVersion: '1' });
    try {
      const before = operationOf(documentOf(app), 'post', '/api/v1/payments');
      const again = operationOf(documentOf(app), 'post', '/api/v1/payments');
      await app.init();
      const after = operationOf(documentOf(app), 'post', '/api/v1/payments');
      expect(again).toEqual(before);
      expect(after).toEqual(before);
      expect(before['x-idempotent']).toMatchObject({ header: 'Idempotency-Key', required: true });
    } finally {
      await app.close();
    }
  });
});
