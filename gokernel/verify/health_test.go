package verify

import (
	"strings"
	"testing"
)

func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		name    string
		r       HealthReport
		verdict string
		reason  string
	}{
		{"healthy", HealthReport{RowsSinceTraining: 10, RecallDrop: 0.01, ResidualRatio: 1.0, ShareSinceTraining: 0.2}, "ok", ""},
		{"recall drop", HealthReport{RowsSinceTraining: 10, RecallDrop: 0.2, ResidualRatio: 1.0}, "retrain", "a drop of 0.200"},
		{"small recall drop", HealthReport{RowsSinceTraining: 10, RecallDrop: 0.06, ResidualRatio: 1.0}, "degrading", "degrading at 0.05"},
		{"residuals", HealthReport{RowsSinceTraining: 10, RecallDrop: 0, ResidualRatio: 2}, "retrain", "2.00 times as far"},
		{"many new rows", HealthReport{RowsSinceTraining: 10, ShareSinceTraining: 0.7, ResidualRatio: 1}, "degrading", "70% of the rows"},
		{"degrading never lowers retrain", HealthReport{RowsSinceTraining: 10, RecallDrop: 0.3, ResidualRatio: 1.2}, "retrain", "degrading at 1.15"},
		{"nothing since training: residuals do not count", HealthReport{RecallDrop: 0.0, ResidualRatio: 1.5}, "ok", "nothing has drifted"},
		{"nothing since training: nor does recall", HealthReport{RecallDrop: 0.2, ResidualRatio: 1.5}, "ok", "nothing has drifted"},
		{"not measured", HealthReport{RowsSinceTraining: 10, RecallDrop: -1, ResidualRatio: -1, ShareSinceTraining: -1}, "ok", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.r
			r.Thresholds = DefaultThresholds
			r.K = 10
			r.judge()
			if r.Verdict != tc.verdict {
				t.Fatalf("verdict %q, want %q (reasons %q)", r.Verdict, tc.verdict, r.Reasons)
			}
			joined := strings.Join(r.Reasons, "; ")
			if tc.reason == "" && len(r.Reasons) != 0 || !strings.Contains(joined, tc.reason) {
				t.Fatalf("reasons %q, want one naming %q", joined, tc.reason)
			}
		})
	}
}

func TestSkew(t *testing.T) {
	for _, tc := range []struct {
		parts      []uint32
		cv, maxOvM float64
	}{
		{[]uint32{5, 5, 5, 5}, 0, 1},
		{[]uint32{0, 0, 0, 8}, 1.7320508, 4},
		{nil, 0, 0},
	} {
		cv, m := skew(tc.parts)
		if d := cv - tc.cv; d > 1e-6 || d < -1e-6 || m != tc.maxOvM {
			t.Errorf("skew(%v) = %v, %v; want %v, %v", tc.parts, cv, m, tc.cv, tc.maxOvM)
		}
	}
}
