// The admin pages' script, served from the same origin (CSP script-src 'self'): draws the charts from the page's
// embedded JSON (money arrives as micro-dollar integer strings, exact; they become numbers only here, to be drawn) and
// sorts tables by the exact values their cells carry.
(function () {
  'use strict';
  var dataElement = document.getElementById('page-data');
  var data = dataElement ? JSON.parse(dataElement.textContent) : {};
  var dollars = function (micro) {
    return micro.map(function (m) {
      return Number(m) / 1e6;
    });
  };
  if (window.Chart) {
    Chart.defaults.animation = false;
    Chart.defaults.responsive = true;
    Chart.defaults.maintainAspectRatio = false;
  }
  var shownLabel = function (c) {
    var shown = c.dataset.shown ? c.dataset.shown[c.dataIndex] : String(c.raw);
    return c.dataset.label + ': ' + shown;
  };
  document.querySelectorAll('canvas[data-chart="capacity"]').forEach(function (canvas) {
    var s = data.charts && data.charts.capacity;
    if (!s || !window.Chart) return;
    new Chart(canvas, {
      type: 'line',
      data: {
        labels: s.days,
        datasets: [
          {
            label: 'daily cost (USD)',
            data: dollars(s.costMicro),
            shown: s.costShown,
            borderColor: '#2563eb',
            backgroundColor: '#2563eb',
            yAxisID: 'usd',
          },
          { label: 'daily runs', data: s.runs, borderColor: '#16a34a', backgroundColor: '#16a34a', yAxisID: 'runs' },
          {
            label: 'cost per completed run (USD)',
            data: dollars(s.perRunMicro),
            shown: s.perRunShown,
            borderColor: '#dc2626',
            backgroundColor: '#dc2626',
            yAxisID: 'perRun',
          },
        ],
      },
      options: {
        plugins: { tooltip: { callbacks: { label: shownLabel } } },
        scales: {
          usd: { type: 'linear', position: 'left', title: { display: true, text: 'USD per day' } },
          runs: { type: 'linear', position: 'right', title: { display: true, text: 'runs' }, grid: { drawOnChartArea: false } },
          perRun: { type: 'linear', position: 'right', title: { display: true, text: 'USD per run' }, grid: { drawOnChartArea: false } },
        },
      },
    });
  });

  // Sorting: int columns compare as BigInt (exact money in 10^-18 USD, counts), text columns by code unit order.
  var cellValue = function (row, index) {
    var cell = row.children[index];
    return cell.hasAttribute('data-sort') ? cell.getAttribute('data-sort') : cell.textContent;
  };
  document.querySelectorAll('table.sortable').forEach(function (table) {
    table.querySelectorAll('th').forEach(function (header, index) {
      var sortBy = function () {
        var type = header.getAttribute('data-type');
        var descending = header.getAttribute('aria-sort') !== 'descending';
        table.querySelectorAll('th').forEach(function (h) {
          h.removeAttribute('aria-sort');
        });
        header.setAttribute('aria-sort', descending ? 'descending' : 'ascending');
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = cellValue(a, index);
          var y = cellValue(b, index);
          var c;
          if (type === 'int' || type === 'pct') {
            var bx = BigInt(x);
            var by = BigInt(y);
            c = bx < by ? -1 : bx > by ? 1 : 0;
          } else c = x < y ? -1 : x > y ? 1 : 0;
          return descending ? -c : c;
        });
        rows.forEach(function (r) {
          body.appendChild(r);
        });
      };
      header.addEventListener('click', sortBy);
      header.addEventListener('keydown', function (e) {
        if (e.key === 'Enter') sortBy();
      });
    });
  });
  document.body.setAttribute('data-ready', 'yes');
})();
