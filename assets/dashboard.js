// The dashboard's own script: small conveniences on top of plain HTML forms and links,
// none of which the screens need to work. A file, not inline: the CSP allows no inline script.
'use strict';

// Copy buttons: data-copy names the element whose text is copied (a new key's secret).
document.addEventListener('click', (event) => {
  const button = event.target.closest('[data-copy]');
  if (!button) return;
  const source = document.getElementById(button.dataset.copy);
  if (!source) return;
  const done = () => {
    button.textContent = 'Copied';
  };
  if (navigator.clipboard) {
    navigator.clipboard.writeText(source.textContent).then(done, () => selectText(source));
  } else {
    selectText(source);
  }
});

function selectText(element) {
  const range = document.createRange();
  range.selectNodeContents(element);
  const selection = window.getSelection();
  selection.removeAllRanges();
  selection.addRange(range);
}

// Rows with data-href open their page when clicked anywhere but on a link, button or field.
document.addEventListener('click', (event) => {
  const row = event.target.closest('[data-href]');
  if (!row || event.target.closest('a, button, input, select, label')) return;
  const link = row.querySelector('a[href]');
  if (link) link.click();
  else window.location.assign(row.dataset.href);
});

// Selects marked data-autosubmit submit their form on change (the project picker).
document.addEventListener('change', (event) => {
  const select = event.target.closest('select[data-autosubmit]');
  if (select && select.form) select.form.requestSubmit();
});

// On a phone the navigation is a row that scrolls sideways: the current screen's link is
// brought into it, on a load and after htmx swapped a screen in.
function showCurrentLink() {
  const current = document.querySelector('.top nav [aria-current="page"]');
  const nav = current && current.parentElement;
  if (!nav || nav.scrollWidth <= nav.clientWidth) return;
  nav.scrollLeft = current.offsetLeft - nav.offsetLeft - (nav.clientWidth - current.offsetWidth) / 2;
}
document.addEventListener('DOMContentLoaded', showCurrentLink);
document.addEventListener('htmx:afterSettle', showCurrentLink);
