"""Executors carry NodeAgents to where the job runs. ``local``: the agent in-process."""
