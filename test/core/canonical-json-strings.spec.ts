import fc from 'fast-check';
import { canonicalJson } from '../../lib/core/hash';

// canonicalJson writes short plain strings itself instead of calling JSON.stringify:
// the output must stay the same character for character, or stored fingerprints change.
describe('canonicalJson strings and keys', () => {
  it('writes every string as JSON.stringify does', () => {
    const samples = [
      '',
      'a',
      'é',
      '\u2028',
      '"',
      '\\',
      '\n',
      '\u001f',
      '\u007f',
      '\ud83d\ude00',
      '\ud800',
      '\udfff',
      'x'.repeat(64),
      'x'.repeat(65),
    ];
    for (const s of samples) {
      expect(canonicalJson(s)).toBe(JSON.stringify(s));
      expect(canonicalJson({ [s]: s })).toBe(JSON.stringify({ [s]: s }));
    }
  });

  it('matches JSON.stringify on arbitrary strings, as values and as keys', () => {
    const text = fc.oneof(fc.string({ unit: 'binary' }), fc.string({ unit: 'grapheme' }), fc.string());
    fc.assert(
      fc.property(text, text, (key, value) => {
        expect(canonicalJson(value)).toBe(JSON.stringify(value));
        expect(canonicalJson({ [key]: value })).toBe(JSON.stringify({ [key]: value }));
      }),
      { numRuns: 2000 },
    );
  });
});
