/**
 * A translation bundle for the view tests: English, with `%1`-style
 * arguments filled in, as a real bundle without a catalog behaves.
 */
import type { TranslationBundle } from '@jupyterlab/translation';

import { untranslated } from '../format';

/**
 * The bundle the views receive in tests.
 */
export const trans = {
  __: untranslated.__,
  _n: (singular: string, plural: string, n: number, ...args: any[]) =>
    untranslated.__(n === 1 ? singular : plural, n, ...args)
} as unknown as TranslationBundle;
