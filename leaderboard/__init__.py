"""The Streamlit leaderboard (installed as ``ddibench.leaderboard``): ``ddibench board serve``."""
