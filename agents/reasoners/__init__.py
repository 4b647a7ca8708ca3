"""Reasoner backends: LMs that write one reasoning step at a time and expose signals of each step."""
