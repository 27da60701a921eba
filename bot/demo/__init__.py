"""``upgradebot demo``: ``world`` (a real Redis, kubesim in the process, the runtime and the
console chat on both) and ``story`` (the stages typed into the chat, each checked)."""
