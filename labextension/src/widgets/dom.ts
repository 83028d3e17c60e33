/**
 * The two DOM helpers the views share: they build nodes once and write text
 * only when it changed, which is what keeps frequent updates flicker-free.
 */

/**
 * Create an element with a class under a parent.
 */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className: string,
  parent: HTMLElement
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  node.className = className;
  parent.appendChild(node);
  return node;
}

/**
 * Set a node's text only when it differs (no needless DOM writes).
 */
export function setText(node: HTMLElement, value: string): void {
  if (node.textContent !== value) {
    node.textContent = value;
  }
}
