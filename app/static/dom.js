// dom.js: the one DOM helper the playground's modules share.

/** `el('div', {class: 'x', 'data-id': 1}, 'text', child)`: an element with attributes and
 * children (strings become text nodes, never HTML: event data is not trusted markup). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === false || value === null || value === undefined) continue;
    node.setAttribute(name, value === true ? '' : String(value));
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}
