"""Models beyond one drill: checkpoint cadence (Young/Daly) and the fleet Monte Carlo."""
