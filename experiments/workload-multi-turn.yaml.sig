{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiI5ZGE4Yjc0ZDI0ZTkwOWFiYTE2N2I1ODA0MTY2MDZhY2Y0NjcwYmExZDM3ZjdkMGYyN2RkNjU4ZjMxNDdhZTBhIn0sIm5hbWUiOiJ3b3JrbG9hZC1tdWx0aS10dXJuLnlhbWwifV19",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "51LCmoYD79eeRWA0t1o/7BeUdTYsjZX51eDpPky+mMzSL14+kxK+o5BoEp80Yi4GguAjPxojXwojLXfRwpClDw==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
