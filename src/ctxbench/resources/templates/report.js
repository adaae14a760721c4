// Switches a panel between its views and hops; the shades and top tokens come precomputed in the data block, the
// colours from reporting/heatmap.py (COLOURS, set by the page), so that a shade reads as on the per-method pages.
const DATA = JSON.parse(document.getElementById('ctxbench-data').textContent);
function shade(a) {
  return a > 0 ? `rgba(${COLOURS.positive},${a / 100})` : a < 0 ? `rgba(${COLOURS.negative},${-a / 100})` : '';
}
function show(panel, key) {
  const d = DATA[panel.id][key];
  const top = new Set(d.t);
  panel.querySelectorAll('.ctx .tok').forEach((s, j) => {
    s.style.background = shade(d.c[j]);
    s.classList.toggle('top', top.has(Number(s.dataset.i)));
  });
  panel.querySelectorAll('.gen .tok').forEach((s, j) => { s.style.background = d.g ? shade(d.g[j]) : ''; });
  panel.querySelectorAll('.variants button').forEach(b => b.classList.toggle('on', b.dataset.key === key));
  panel.querySelector('.toplist').textContent = d.t.map(
    i => '\u00ab' + panel.querySelector(`.ctx .tok[data-i="${i}"]`).textContent + '\u00bb').join(', ');
}
document.addEventListener('click', e => {
  const b = e.target.closest('button[data-key]');
  if (!b) return;
  const panel = b.closest('.panel');
  const panels = panel ? [panel] : b.closest('.example').querySelectorAll('.panel');
  panels.forEach(p => { if (DATA[p.id][b.dataset.key]) show(p, b.dataset.key); });
});
