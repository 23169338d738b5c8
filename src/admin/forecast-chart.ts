import type { RecordedForecast } from '../forecast/forecast-records';
import { displayUsd } from '../money';
import { microUsd } from '../reports/render-html';
import type { DayFigures } from './admin-data';
import { html, type Raw } from './html';

const W = 720;
const H = 240;
const PAD = 10;
const AXIS = 22;

/**
 * The user page's month as a server-drawn SVG: spend to date (the page's daily costs, added up), the forecast band from
 * the last recorded forecast's day to the month's end and the limit. The band's edges are the forecast's own steps at
 * the median and the high cost (spendByDay: what can be spent by the end of each day with a slot that runs), so it
 * rises on the days the schedules spend and stays flat on the others (a weekday task's weekends) and at the limit; a
 * forecast recorded without them is drawn straight to its month-end figures. Heights are drawn from integer
 * micro-dollars and money is only ever shown as the exact figures formatted, never computed from a pixel.
 */
export function forecastChart(daily: DayFigures[], forecast: RecordedForecast | null): Raw {
  const days = daily.length;
  let running = 0n;
  const cumulative = daily.map((d) => (running += BigInt(microUsd(d.costUsd))));
  // the forecast was made during its day: its band starts where that day starts, and the spend runs to the last day with any
  const upTo = forecast ? daily.findIndex((d) => d.day === forecast.day) : -1;
  const shownDays = Math.max(lastSpendDay(daily) + 1, upTo);
  const m = (usd: string | null) => (usd === null ? 0n : BigInt(microUsd(usd)));
  const start = forecast ? m(forecast.spentUsd) + m(forecast.reservedUsd) : 0n;
  const top = [m(forecast?.limitUsd ?? null), m(forecast?.highUsd ?? null), ...cumulative.slice(0, shownDays)].reduce(
    (a, b) => (b > a ? b : a),
    1n,
  );
  const scale = (top * 21n) / 20n;
  const plotH = H - AXIS - PAD;
  const x = (dayEnd: number) => PAD + Math.round((dayEnd * (W - 2 * PAD)) / Math.max(days, 1));
  const y = (micro: bigint) => PAD + plotH - Number((micro * BigInt(plotH)) / scale);
  const spendPoints = [`${x(0)},${y(0n)}`, ...cumulative.slice(0, shownDays).map((c, i) => `${x(i + 1)},${y(c)}`)].join(' ');
  const from = upTo >= 0 ? upTo : days;
  /** One edge of the band: from the forecast's start to the end of each day left, at what can be spent by then. */
  const edge = (f: RecordedForecast, pick: 'medianUsd' | 'highUsd'): string[] => {
    const first = `${x(from)},${y(start)}`;
    if (f.spendByDay === null) return [first, `${x(days)},${y(m(f[pick]))}`];
    const steps = f.spendByDay;
    let level = start;
    let k = 0;
    const points = [first];
    for (let i = from; i < days; i++) {
      while (k < steps.length && steps[k].day <= daily[i].day) level = m(steps[k++][pick]);
      points.push(`${x(i + 1)},${y(level)}`);
    }
    return points;
  };
  const limitY = forecast?.limitUsd ? y(m(forecast.limitUsd)) : null;
  const summary = forecast
    ? `Spent ${displayUsd(forecast.spentUsd)} by ${forecast.day}; forecast to the month's end ${displayUsd(forecast.medianUsd)} ` +
      `(median) to ${displayUsd(forecast.highUsd)} (high)` +
      (forecast.limitUsd ? ` against a limit of ${displayUsd(forecast.limitUsd)}` : ', no limit')
    : 'Spend to date; no forecast recorded for this month yet (the budget sweep records one a day).';
  return html`<figure class="forecast-chart">
    <svg viewBox="0 0 ${W} ${H}" role="img" aria-labelledby="forecast-title forecast-desc">
      <title id="forecast-title">Spend to date and the month-end forecast</title>
      <desc id="forecast-desc">${summary}</desc>
      <line class="axis" x1="${PAD}" y1="${PAD + plotH}" x2="${W - PAD}" y2="${PAD + plotH}"></line>
      ${
        forecast
          ? html`<polygon
                class="band"
                points="${[...edge(forecast, 'highUsd'), ...edge(forecast, 'medianUsd').reverse()].join(' ')}"
              ></polygon>
              <polyline class="median" points="${edge(forecast, 'medianUsd').join(' ')}"></polyline>`
          : ''
      }
      ${limitY === null ? '' : html`<line class="limit" x1="${PAD}" y1="${limitY}" x2="${W - PAD}" y2="${limitY}"></line>`}
      <polyline class="spend" points="${spendPoints}"></polyline>
      <text x="${PAD}" y="${H - 6}">${daily[0]?.day ?? ''}</text>
      <text x="${W - PAD}" y="${H - 6}" text-anchor="end">${daily[days - 1]?.day ?? ''}</text>
    </svg>
    <figcaption>${summary}</figcaption>
  </figure>`;
}

function lastSpendDay(daily: DayFigures[]): number {
  for (let i = daily.length - 1; i >= 0; i--) if (BigInt(microUsd(daily[i].costUsd)) > 0n) return i;
  return -1;
}
