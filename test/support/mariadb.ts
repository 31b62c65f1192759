/** The test MariaDB / MySQL (root, empty password); MYSQL_* variables override it. */
export const mariadbConnection = {
  type: 'mariadb' as const,
  host: process.env.MYSQL_HOST ?? '127.0.0.1',
  port: Number(process.env.MYSQL_PORT ?? 3306),
  username: process.env.MYSQL_USER ?? 'root',
  password: process.env.MYSQL_PASSWORD ?? '',
};
