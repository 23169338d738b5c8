// The page script of usage.html: draws the three charts from the embedded series (values arrive as micro-dollar
// integer strings). Inlined by render-html.ts, which allows it by its hash in the page's Content-Security-Policy.
(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('chart-data').textContent);
  // Presentation edge: exact micro-dollar strings become numbers only here, to be drawn.
  var dollars = function (micro) {
    return micro.map(function (m) {
      return Number(m) / 1e6;
    });
  };
  var colors = ['#2563eb', '#16a34a', '#dc2626', '#9333ea', '#ea580c', '#0891b2'];
  Chart.defaults.animation = false;
  Chart.defaults.responsive = true;
  Chart.defaults.maintainAspectRatio = false;
  // Tooltips show the exact amounts formatted by cronledger, never a float rendered back to text.
  var tooltip = {
    callbacks: {
      label: function (c) {
        return (c.dataset.label ? c.dataset.label + ': ' : '') + c.dataset.shown[c.dataIndex];
      },
    },
  };
  var usdAxis = { title: { display: true, text: 'USD' } };
  new Chart(document.getElementById('chart-daily'), {
    type: 'bar',
    data: {
      labels: data.days,
      datasets: data.daily.map(function (s, i) {
        return { label: s.label, data: dollars(s.micro), shown: s.shown, backgroundColor: colors[i] };
      }),
    },
    options: { plugins: { tooltip: tooltip }, scales: { x: { stacked: true }, y: Object.assign({ stacked: true }, usdAxis) } },
  });
  new Chart(document.getElementById('chart-users'), {
    type: 'bar',
    data: {
      labels: data.topUsers.labels,
      datasets: [{ label: 'cost', data: dollars(data.topUsers.micro), shown: data.topUsers.shown, backgroundColor: colors[0] }],
    },
    options: { indexAxis: 'y', plugins: { legend: { display: false }, tooltip: tooltip }, scales: { x: usdAxis } },
  });
  new Chart(document.getElementById('chart-models'), {
    type: 'bar',
    data: {
      labels: data.models.labels,
      datasets: [{ label: 'cost', data: dollars(data.models.micro), shown: data.models.shown, backgroundColor: colors[3] }],
    },
    options: { plugins: { legend: { display: false }, tooltip: tooltip }, scales: { y: usdAxis } },
  });
  document.body.setAttribute('data-charts', 'drawn');
})();
