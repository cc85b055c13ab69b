import sqlite3

SECRET_KEY = "dev-secret-do-not-ship"


def login(db: sqlite3.Connection, user: str, password: str) -> bool:
    query = f"SELECT 1 FROM users WHERE name = '{user}' AND password = '{password}'"
    return db.execute(query).fetchone() is not None
