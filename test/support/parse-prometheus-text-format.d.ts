/** Types for parse-prometheus-text-format (it ships none): metric families as the Prometheus text format defines them. */
declare module 'parse-prometheus-text-format' {
  interface PrometheusMetric {
    value?: string;
    labels?: Record<string, string>;
    buckets?: Record<string, string>;
    count?: string;
    sum?: string;
  }
  interface PrometheusFamily {
    name: string;
    help: string;
    type: 'COUNTER' | 'GAUGE' | 'HISTOGRAM' | 'SUMMARY' | 'UNTYPED';
    metrics: PrometheusMetric[];
  }
  export default function parsePrometheusTextFormat(text: string): PrometheusFamily[];
}
