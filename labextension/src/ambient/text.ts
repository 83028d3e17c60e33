/**
 * The sentences of the kernel's ambient state (random generators, library
 * settings, IPython's extensions and formatters…), which travels with a
 * checkpoint beside the variables: what a resume brought back and what it
 * could not, each with why. Shared by the resume's toast and the panel so
 * that both say the same. Pure functions: no DOM, no server.
 */
import type { TranslationBundle } from '@jupyterlab/translation';

import { sentence } from '../format';
import { IAmbientItem, IRestoreAmbient } from '../tokens';

/**
 * Items with their reasons: "thread worker-1 (a running thread cannot
 * travel); connection 10.0.0.1:5432 (…)".
 */
export function ambientItemsText(items: ReadonlyArray<IAmbientItem>): string {
  return items
    .map(item => {
      const reason = (item.reason ?? '').trim().replace(/\.$/, '');
      return reason ? `${item.name} (${reason})` : item.name;
    })
    .join('; ');
}

/**
 * What a resume did with the ambient state: the kernel's sentence ("Random
 * state, plotting settings and 2 extensions restored."), then what could
 * not be restored, each with why; '' when there is nothing to say. `told`
 * is text already shown (the server's message): a sentence it already
 * holds is not said twice.
 */
export function ambientRestoreText(
  ambient: IRestoreAmbient | null | undefined,
  trans: TranslationBundle,
  told = ''
): string {
  if (!ambient) {
    return '';
  }
  const parts: string[] = [];
  const text = (ambient.text ?? '').trim().replace(/\.$/, '');
  if (text && !told.includes(text)) {
    parts.push(sentence(text));
  }
  const lost = ambient.not_restored ?? [];
  if (lost.length) {
    parts.push(trans.__('Not restored: %1.', ambientItemsText(lost)));
  }
  return parts.join(' ');
}

/**
 * " Will not continue after the resume: thread worker-1." for what of the
 * kernel's state a pause could not carry (its toast is short: names only,
 * the pause dialog gave the reasons); '' when none.
 */
export function notCarriedText(
  items: ReadonlyArray<IAmbientItem> | null | undefined,
  trans: TranslationBundle
): string {
  if (!items || !items.length) {
    return '';
  }
  return (
    ' ' +
    trans.__(
      'Will not continue after the resume: %1.',
      items.map(item => item.name).join(', ')
    )
  );
}
