/**
 * What a user sees of a widget's DOM (jsdom): the shown elements, their text
 * line by line, and the buttons on show. An element is shown when neither it
 * nor an ancestor up to the widget's node is `hidden` or Lumino-hidden.
 */

function shown(node: Element, root: Element): boolean {
  for (let n: Element | null = node; n; n = n.parentElement) {
    if ((n as HTMLElement).hidden || n.classList.contains('lm-mod-hidden')) {
      return false;
    }
    if (n === root) {
      break;
    }
  }
  return true;
}

/**
 * The elements under `root` (itself included) that a user sees.
 */
export function visibleElements(root: HTMLElement): HTMLElement[] {
  return [root, ...Array.from(root.querySelectorAll<HTMLElement>('*'))].filter(
    e => shown(e, root)
  );
}

/**
 * The text a user sees under `root`, one line per shown element that holds
 * text of its own.
 */
export function visibleLines(root: HTMLElement): string[] {
  return visibleElements(root)
    .map(e =>
      Array.from(e.childNodes)
        .filter(c => c.nodeType === Node.TEXT_NODE)
        .map(c => c.textContent ?? '')
        .join('')
    )
    .filter(Boolean);
}

/**
 * The buttons a user sees under `root`.
 */
export function visibleButtons(root: HTMLElement): HTMLElement[] {
  return visibleElements(root).filter(e => e.tagName === 'BUTTON');
}

/**
 * The shown button labelled `label`; fails the test when there is none.
 */
export function button(root: HTMLElement, label: string): HTMLElement {
  const found = visibleButtons(root).find(b => b.textContent === label);
  if (!found) {
    const labels = visibleButtons(root).map(b => b.textContent);
    throw new Error(`No button "${label}"; there are: ${labels.join(', ')}`);
  }
  return found;
}
