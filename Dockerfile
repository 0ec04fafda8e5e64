# One image for every cronchain process; docker-compose.yml picks the command.
FROM python:3.11-slim
WORKDIR /app
COPY . .
RUN pip install --no-cache-dir .
ENV CRONCHAIN_HOME=/var/lib/cronchain
CMD ["celery", "-A", "cronchain.tasks", "worker", "--loglevel", "INFO"]
